"""Shared fixtures: a CLI runner and the path of the repository."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Each xdist worker already has a core: torch's and BLAS's default of a thread per core makes
    # N workers run N*N spinning threads, which multiplied some fixtures' time by 10 under load.
    # Set before torch or numpy is imported; the CLI subprocesses the tests start inherit it.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def tinytrain(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, as a user would."""
    proc = subprocess.run([sys.executable, "-m", "tinytrain", *map(str, args)],
                          capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"tinytrain {' '.join(map(str, args))} failed "
                             f"({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def cli():
    return tinytrain


# The fast tier (`make test-fast`, `pytest -m "not slow"`) leaves out whole modules that run QEMU
# twins, TTE's 128x128 networks, the fleet, packaging, sanitizers or bench scripts; single slow
# tests elsewhere carry @pytest.mark.slow. What stays still checks every op's numerics (layer and
# model parity against PyTorch, onnxruntime and LiteRT), the planner, codegen and the CLI's errors.
SLOW_MODULES = {
    # QEMU twins and boards
    "test_boards", "test_new_boards", "test_run_ux_twin", "test_tte_on_board", "test_link_faults",
    "test_link_sgd", "test_library_mcu", "test_stream_trained", "test_trace_profile",
    "test_checkpoint_state", "test_device_validation", "test_channel_stream",
    "test_kernels_opt_models",
    # bench scripts run end to end
    "test_bench_int8_forward", "test_bench_members", "test_bench_pretrain", "test_bench_trajectory",
    "test_bench_qemu", "test_bench_auto_plan",
    # the fleet, packaging, sanitizers, fuzzing, plan searches that train
    "test_fleet_deploy", "test_fleet_flower", "test_fleet_core", "test_packaging",
    "test_sanitized_training", "test_fuzz", "test_fuzz_frames", "test_autoplan_cli",
    "test_autoplan_remat",
    # the MLPerf Tiny networks from Keras (the tiny converter-written ones stay fast)
    "test_keras_models",
}


# single tests that are slow in modules that are not: a name takes every parametrisation,
# "name[id]" one case (its other cases stay fast)
SLOW_TESTS = {
    # on a QEMU twin
    "test_remat": {"test_int8_recomputed_build_on_the_twin",
                   "test_int8_recomputed_build_trains_bit_identically",
                   "test_a_plan_that_fits_only_with_recompute_links",
                   "test_auto_recomputes_only_what_the_board_needs",  # 128x128 MobileNetV2
                   "test_a_share_bounds_the_recompute"},
    "test_online_api": {"test_example_adapts_to_new_digits_on_the_twin"},
    "test_library_prefix": {"test_prefixed_firmware_runs_on_the_twin_with_bin_and_hex"},
    "test_stream": {"test_streamed_int8_build_on_the_stm32_twin_matches_the_host"},
    "test_kernels_opt_pooled": {"test_twin_matches_reference_and_host", "test_bench_m7"},
    "test_kernels_opt_cs": {"test_twin_matches_reference_and_host_bits",
                            "test_m7_instructions_per_mac"},
    "test_kernels_opt_conv": {"test_conv_opt_matches_reference",
                              "test_conv_opt_instructions_per_mac_m7",
                              "test_conv_opt_helium_pointwise_m55",
                              "test_conv_opt_in_bounds_host_sanitizers"},
    "test_kernels_opt_dw": {"test_dw_and_add_opt_match_reference",
                            "test_dw_and_add_opt_are_faster_on_m7",
                            "test_dw_opt_at_size_and_debug_levels_matches_reference",
                            "test_every_runtime_kernel_compiles_at_every_level"},
    # big networks, long runs, library packaging
    "test_kernel_choice": {"test_mcunet_148_kb_scheme_links_on_the_stm32f746_with_generic_kernels"},
    "test_autoplan_deterministic": {"test_the_same_plan_idle_busy_and_slow"},
    "test_autoplan": {"test_search_respects_the_budget_exactly",  # searches that train
                      "test_search_finds_the_optimum_of_the_predicted_score",  # brute force
                      "test_toml_round_trips_into_update",
                      "test_candidates_are_scored_on_the_mean_of_several_sample_orders"},
    # one case of a sweep whose others keep the numerics in the fast tier
    "test_dw_partial": {"test_int8_depthwise_partial_matches_numpy_simulation"
                        "[DigitsCNN-plan0-1-stochastic]"},
    "test_quantize": {"test_quantised_training_matches_numpy_simulation"
                      "[TinyMobileNet-last:3-stochastic]"},
    # builds with the cache off and on (the cache's logic stays in the fast tier)
    "test_objcache": {"test_a_cached_build_equals_an_uncached_one"},
    "test_library_export": {"test_cmake_export_links_into_a_c_and_a_cpp_program",
                            "test_two_prefixed_models_train_in_one_program",
                            "test_zephyr_modules_build_two_models"},
    "test_resume": {"test_a_resumed_run_ends_as_one_never_interrupted"},
    "test_weight_headroom": {"test_trained_weights_grow_past_calibration"},
    "test_new_head": {"test_a_fresh_int8_head_learns_as_fp32_does"},
    "test_conv1d": {"test_conv1d_trains_on_the_m7_twin_and_fits_as_planned"},
    "test_rnn": {"test_recurrent_layer_trains_on_the_m7_twin_and_fits_as_planned"},
    "test_kernels_opt_f32": {"test_bench_m7"},
}


# what this session collected, for test_tiers.py to check the "name[id]" entries without a
# collection of its own: the modules, and the (module, case) entries that matched an item
# a kernel test's `target` on a QEMU twin (tests/ckernel): slow; its host case stays fast
TWIN_TARGETS = {"m7", "m4", "m55"}
COLLECTED_MODULES: set[str] = set()
SLOW_CASES_SEEN: set[tuple[str, str]] = set()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        name = getattr(item, "originalname", item.name)
        slow = SLOW_TESTS.get(item.path.stem, ())
        COLLECTED_MODULES.add(item.path.stem)
        if item.name in slow:
            SLOW_CASES_SEEN.add((item.path.stem, item.name))
        twin = getattr(getattr(item, "callspec", None), "params", {}).get("target")
        if item.path.stem in SLOW_MODULES or name in slow or item.name in slow or \
                twin in TWIN_TARGETS:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def tte_onnx(tmp_path_factory) -> dict[str, Path]:
    """TTE's three 128x128 networks as ONNX, each exported from torch.manual_seed(0), once per
    session for every worker (tests/shared.py): four modules train, plan and link them."""
    import warnings

    import torch

    from tests.shared import shared_dir
    from tests.torch_models import export
    from tests.tte_schemes import NETWORKS

    def make(d: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, net in NETWORKS.items():
                torch.manual_seed(0)
                export(net(), d / f"{name}.onnx")

    d = shared_dir(tmp_path_factory, "tte_onnx", make)
    return {name: d / f"{name}.onnx" for name in sorted(p.stem for p in d.glob("*.onnx"))}
