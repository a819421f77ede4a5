"""Execute a notebook in place with nbclient (what `jupyter nbconvert --execute` does), on a machine without the
jupyter command: the GPU machines of the course's full-mode runs.

    python experiments/gpu/run_notebook.py notebooks/07_pretraining.ipynb --timeout 540
"""

import argparse
import signal
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("notebook")
    p.add_argument("--timeout", type=int, default=600, help="seconds a cell may take")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a `timeout` still writes what ran (finally below)
    path = Path(args.notebook)
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    client = NotebookClient(
        nb, timeout=args.timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    try:
        client.execute()
    finally:  # keep what ran, also when a cell failed
        nbformat.write(nb, path)
        print(f"{path}: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
