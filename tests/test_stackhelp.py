"""`vmio help stack`: the stack file's layers and their parameters, from the registries the
stack parser reads (the README's Markdown tables are checked by a Rust test in vmio-sim)."""

from __future__ import annotations

from conftest import run_vmio


def test_help_stack_lists_every_layout_scheduler_model_and_their_parameters():
    r = run_vmio("help", "stack")
    assert r.returncode == 0, r.stderr
    assert "[scheduler] name = none | mq-deadline | cfq | mcfq   (default: mq-deadline)" in r.stdout
    assert "[[volume]] layout = single | linear | stripe | raid0" in r.stdout
    assert "[[device]] model = hdd | ssd | ram" in r.stdout
    assert "[page_cache] eviction = clock | lru   (default: clock)" in r.stdout
    assert "[[vm.disk]] cache = none | writeback | writethrough | directsync | unsafe" in r.stdout
    assert "[vm.disk.filesystem] type = ext4   (default: ext4)" in r.stdout
    assert "[vm.page_cache] eviction = clock | lru   (default: clock)" in r.stdout
    for key in ("stripe_size", "chunk", "slice_sync", "bw_window", "rpm", "gc_policy"):
        assert f"    {key} " in r.stdout, key
    for key in ("read_ahead_kb", "mount", "data", "commit", "barrier", "journal_size"):
        assert f"    {key} " in r.stdout, key


def test_help_stack_markdown_prints_the_tables():
    r = run_vmio("help", "stack", "--markdown")
    assert r.returncode == 0, r.stderr
    assert "| `quantum` | `cfq`, `mcfq` |" in r.stdout


def test_help_without_a_topic_is_a_usage_error_naming_the_topic():
    r = run_vmio("help")
    assert r.returncode == 2
    assert "vmio: error: missing what to show help on (vmio help stack | workload)" in r.stderr


def test_help_workload_lists_the_personalities_trace_formats_and_profiles():
    r = run_vmio("help", "workload")
    assert r.returncode == 0, r.stderr
    for name in ("fileserver", "varmail", "msr", "spc", "blkparse", "fio-iolog", "msn"):
        assert name in r.stdout, name
