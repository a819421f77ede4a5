from .. import _old_names
from . import variants  # noqa: F401 -- registers notebook 11's switches in SWITCHES, so every BertModel has them

__getattr__ = _old_names(__name__)  # the names of bertlib 0.2's module `bertlib.model`, for one release
