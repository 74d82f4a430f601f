"""The memory and compute floors: what a forward must read and compute, over measured rates."""

import pytest
import torch

from engine.models.fastlm import FastLM
from tiny_models import tiny_llama
from tools.floors import RateSampler, measure_gemm_gflops, measure_read_gb_s, model_floors


def param_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def test_an_untied_model_reads_every_weight_but_its_input_embeddings():
    model = tiny_llama(0, hidden=64, layers=2)  # untied: lm_head is its own matrix
    floors = model_floors(model, read_gb_s=1.0, gemm_gflops=1.0)
    embeddings = model.get_input_embeddings().weight
    assert floors.weight_bytes == param_bytes(model) - embeddings.numel() * embeddings.element_size()
    assert floors.kv_bytes_per_position == 2 * 2 * 2 * 16 * 4  # K and V, 2 layers, 2 KV heads, d = 16, fp32


def test_a_tied_head_is_counted_once_and_fusing_changes_nothing():
    model = tiny_llama(0, hidden=64, layers=2)
    model.lm_head.weight = model.get_input_embeddings().weight
    before = model_floors(model, 1.0, 1.0)
    assert before.weight_bytes == param_bytes(model)  # parameters() yields the shared matrix once
    FastLM(model)  # q/k/v and gate/up become views of fused weights
    assert model_floors(model, 1.0, 1.0) == before


def test_floors_grow_with_the_context_and_the_new_tokens():
    floors = model_floors(tiny_llama(0), read_gb_s=10.0, gemm_gflops=100.0)
    assert floors.memory_ms(1, 1000) > floors.memory_ms(1, 10)
    extra_kv = floors.kv_bytes_per_position * 63 / 1e7  # ms: 63 more positions at 10 GB/s
    assert floors.memory_ms(64, 100) - floors.memory_ms(1, 100) == pytest.approx(extra_kv)
    assert floors.compute_ms(64, 100) > 60 * floors.compute_ms(1, 100)


def test_the_rates_are_measured_on_this_device():
    assert measure_read_gb_s(torch.device("cpu"), mib=16, repeats=2) > 0.1
    assert measure_gemm_gflops(torch.float32, torch.device("cpu"), repeats=2) > 0.1


def test_sampled_rates_are_summarised_as_the_forwards_are_and_keep_their_best():
    """The floors of a profile are those of the moments its forwards ran in: the median of the rates sampled
    between the passes (the best with --statistic min), the best sample kept beside it."""
    sampler = RateSampler(torch.float32, torch.device("cpu"), mib=4)
    sampler.sample()
    assert len(sampler.reads) == len(sampler.gemms) == 1 and sampler.reads[0] > 0.1
    sampler.reads, sampler.gemms = [10.0, 40.0, 20.0], [100.0, 300.0, 200.0]
    model = tiny_llama(0)
    median = sampler.floors(model)
    assert (median.read_gb_s, median.gemm_gflops, median.samples) == (20.0, 200.0, 3)
    assert (median.read_gb_s_best, median.gemm_gflops_best) == (40.0, 300.0)
    best = sampler.floors(model, "min")
    assert (best.read_gb_s, best.gemm_gflops) == (40.0, 300.0)
