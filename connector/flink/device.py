"""Which GPU a parallel instance of the parse function uses (pure code).

Flink's external-resource plugin tells the TaskManager which GPUs it has, but PyFlink's Python side cannot
read the GPU a slot was given. So each instance picks its device itself, before CUDA starts in its worker:
with one visible device (one GPU per TaskManager, CUDA_VISIBLE_DEVICES set per TaskManager) it keeps it;
with several it takes `subtask index % count`; a number in 'parse.gpu-device' picks that visible device.
"""

from __future__ import annotations

__all__ = ["choose_device"]


def choose_device(setting: str, subtask_index: int, visible: str | None) -> str | None:
    """The value to export as CUDA_VISIBLE_DEVICES, or None to leave the environment as it is.

    >>> choose_device("auto", 3, "0,1")
    '1'
    >>> choose_device("auto", 3, "2") is None
    True
    """
    devices = [d.strip() for d in (visible or "").split(",") if d.strip()]
    if setting != "auto":
        number = int(setting)
        if devices:
            return devices[number % len(devices)]
        return str(number)
    if len(devices) <= 1:
        return None
    return devices[subtask_index % len(devices)]
