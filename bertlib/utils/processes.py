"""The training process and its peers: the process group that `torchrun` describes (this process's rank among how
many), Ctrl-C or SIGTERM turned into a request that the training loop honours between steps, and the error it raises
once it has (`TrainingInterrupted`).

Written by hand: plumbing that notebook 07's loop uses; the notebook explains what it is for.
"""

__all__ = ["world", "init_distributed", "stop_signals", "TrainingInterrupted"]

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist


def world() -> tuple[int, int]:
    "(number of processes, this process's rank): (1, 0) outside `torchrun`."
    return (dist.get_world_size(), dist.get_rank()) if dist.is_initialized() else (1, 0)


def init_distributed() -> bool:
    "Join the process group that `torchrun` describes in the environment; True if this call created it."
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return False
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return True


def _usual_way_out(signum: int, handler: Any, frame: Any) -> None:
    """Do what `handler`, the handler before `stop_signals`, does with a signal: Ctrl-C's KeyboardInterrupt, or the end
    (said in one line, as the process ends by the signal itself)."""
    if callable(handler):
        handler(signum, frame)
    elif handler != signal.SIG_IGN:
        said = f"stopped at once by a second {signal.Signals(signum).name}, without a checkpoint of this step\n"
        os.write(2, said.encode())
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


@contextmanager
def stop_signals() -> Iterator[list[int]]:
    """Turn the first SIGINT or SIGTERM into a request (the list it yields gets the signal number), which the
    loop honours between steps; a second signal takes the usual way out at once (Ctrl-C's KeyboardInterrupt; for
    SIGTERM, the end of the process, said in one line), at the end of the operation that runs, as Ctrl-C's does.

    Python runs a signal's handler between bytecodes only, once however often the signal came: two Ctrl-C during one
    slow operation would reach it as one. So the signals are also counted on a wakeup pipe, to which the interpreter
    writes one byte per signal as it arrives."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield received
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    reader, writer = os.pipe()
    os.set_blocking(reader, False)
    os.set_blocking(writer, False)
    wakeup = signal.set_wakeup_fd(writer, warn_on_full_buffer=False)

    def take_usual_way(signum, frame) -> None:
        _usual_way_out(signum, previous[signum], frame)

    def request_stop(signum, frame) -> None:
        try:
            arrived = sum(byte in previous for byte in os.read(reader, 512))  # other signals write bytes too
        except BlockingIOError:
            arrived = 1
        for s in previous:
            signal.signal(s, take_usual_way)
        if arrived > 1:
            _usual_way_out(signum, previous[signum], frame)
        received.append(signum)

    for s in previous:
        signal.signal(s, request_stop)
    try:
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(wakeup)
        os.close(reader)
        os.close(writer)


class TrainingInterrupted(Exception):
    "Raised by `fit` after Ctrl-C (SIGINT) or SIGTERM, once the checkpoint of the current step is written."

    def __init__(self, signum: int, step: int, saved: bool):
        self.signum, self.step, self.saved = signum, step, saved
        where = "checkpoint saved; continue with --resume" if saved else "no run folder, nothing saved"
        super().__init__(f"stopped by {signal.Signals(signum).name} at step {step}: {where}")
