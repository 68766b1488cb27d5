"""TTE's fifteen shipped sparse-update schemes (tiny-training `compilation/mcu_ir_gen.py`) for
its three networks, as `--update` strings, with the networks built layer for layer like TTE's
(`tests/torch_models.py`; no feature-mix conv, so the indices land where TTE meant) and TTE's
published peak SRAM for the 99 KB-class schemes (MCUNetV3 paper, sparse update + reorder)."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from tests.torch_models import MCUNet5FPS, MobileNetV2, ProxylessNAS

NETWORKS: dict[str, Callable[[], nn.Module]] = {
    "MobileNetV2-w0.35": lambda: MobileNetV2(0.35, 128, 10),
    "ProxylessNAS-w0.3": lambda: ProxylessNAS(0.3, 128, 10),
    "MCUNet-5FPS": lambda: MCUNet5FPS(128, 10),
}
# (network, budget KB) -> plan
SCHEMES: dict[tuple[str, int], str] = {
    ("MCUNet-5FPS", 49): "tte:n_bias=20,idx=23-24-27-30-33-39,ratio=0-0.25-0.5-0.5-0-0",
    ("MCUNet-5FPS", 74): "tte:n_bias=21,idx=21-23-24-26-27-30,ratio=1-0-1-0-0.5-1",
    ("MCUNet-5FPS", 99): "tte:n_bias=22,idx=21-24-27-30-36-39,ratio=1-1-1-1-0.125-0.25",
    ("MCUNet-5FPS", 124): "tte:n_bias=24,idx=21-24-27-30-33-39,ratio=0.25-1-1-1-0.5-0.5",
    ("MCUNet-5FPS", 148): "tte:n_bias=23,idx=21-24-27-30-36-39,ratio=1-1-1-1-1-0.5",
    ("MobileNetV2-w0.35", 49):
        "tte:n_bias=16,idx=36-39-40-41-42-45-48-49,ratio=1-1-0-0.25-0.125-0.125-0.125-0.125",
    ("MobileNetV2-w0.35", 73):
        "tte:n_bias=20,idx=32-33-36-39-41-42-45-48,ratio=0.125-0.5-0.5-1-0.25-0.125-0.125-1",
    ("MobileNetV2-w0.35", 99):
        "tte:n_bias=25,idx=27-30-33-36-39-42-45-48,ratio=1-1-1-1-1-0.125-0.5-1",
    ("MobileNetV2-w0.35", 123):
        "tte:n_bias=31,idx=27-30-33-36-39-42-45-48,ratio=1-1-1-1-1-0.5-1-1",
    ("MobileNetV2-w0.35", 138):
        "tte:n_bias=34,idx=27-30-33-36-39-42-45-48,ratio=1-1-1-1-1-1-1-1",
    ("ProxylessNAS-w0.3", 49):
        "tte:n_bias=21,idx=39-42-44-45-50-51-54-57,ratio=0.25-1-0-1-0-0.125-0.25-0.25",
    ("ProxylessNAS-w0.3", 74):
        "tte:n_bias=28,idx=33-36-39-42-45-51-54-57,ratio=0.5-0.25-1-1-1-0.5-0.25-0.5",
    ("ProxylessNAS-w0.3", 98):
        "tte:n_bias=25,idx=36-39-42-45-48-51-54-57,ratio=1-0.5-1-1-0.25-0.5-1-1",
    ("ProxylessNAS-w0.3", 120):
        "tte:n_bias=32,idx=36-39-42-45-48-51-54-57,ratio=1-1-1-1-0.5-1-1-1",
    ("ProxylessNAS-w0.3", 148):
        "tte:n_bias=45,idx=36-39-42-45-48-51-54-57,ratio=1-1-1-1-1-1-1-1",
}
# TTE's peak SRAM (KB) with its ~99 KB schemes (sparse update + operator reordering).
TTE_PEAK_KB = {"MobileNetV2-w0.35": 141, "ProxylessNAS-w0.3": 135, "MCUNet-5FPS": 173}
# The 99 KB-class scheme of each network.
MAIN_SCHEME = {"MobileNetV2-w0.35": 99, "ProxylessNAS-w0.3": 98, "MCUNet-5FPS": 99}
