from .. import _old_names

__getattr__ = _old_names(__name__)  # the names of bertlib 0.2's module `bertlib.model`, for one release
