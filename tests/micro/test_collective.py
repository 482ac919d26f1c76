"""The collective micro-benchmark: nccl-tests' sizes and bus bandwidths, exact checking,
and real torchrun jobs on the CPU (gloo)."""

import dataclasses
import json
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from trainperf.micro import collective as col
from trainperf.micro.collective import (
    COLLECTIVES,
    Participant,
    Sweep,
    bandwidths,
    format_table,
    layout,
    parse_bytes,
    sizes,
)

ALL_OPS = list(col.OPS)
CPU = torch.device("cpu")


def document(**fields):
    doc = {
        "kind": "collective",
        "ops": ALL_OPS,
        "min_bytes": 1024,
        "max_bytes": 16 * 1024,
        "factor": 4,
        "dtype": "fp32",
        "warmup": 1,
        "iters": 2,
        "device": "cpu",
        "timeout_s": 60,
    }
    return doc | fields


# ---------------------------------------------------------------- sizes and bandwidths


@pytest.mark.parametrize(
    "text, expected",
    [("1K", 1024), ("8M", 8 * 2**20), ("1G", 2**30), ("8m", 8 * 2**20), ("4k", 4096)]
    + [("123", 123), (" 16K ", 16384), ("0", 0)],
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["8X", "", "1.5M", "-1", "K", "8MB", "M8"])
def test_parse_bytes_rejects(text):
    with pytest.raises(ValueError) as info:
        parse_bytes(text)
    assert str(info.value) == (
        f"size '{text}' is not valid: use a number with an optional K, M or G suffix, e.g. 8M"
    )


def test_sizes():
    assert sizes(1024, 16384, 4) == [1024, 4096, 16384]
    assert sizes(1024, 20000, 4) == [1024, 4096, 16384]
    assert sizes(8, 8, 2) == [8]
    assert sizes(1, 2**30, 2)[-1] == 2**30


@pytest.mark.parametrize(
    "args, message",
    [
        ((1024, 4096, 1), "factor must be at least 2, got 1"),
        ((4096, 1024, 2), "max_bytes (1024) is smaller than min_bytes (4096)"),
        ((0, 1024, 2), "min_bytes must be at least 1, got 0"),
    ],
)
def test_sizes_rejects(args, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        sizes(*args)


@pytest.mark.parametrize(
    "op, busbw",
    [
        ("all_reduce", 1.5),
        ("all_gather", 0.75),
        ("reduce_scatter", 0.75),
        ("all_to_all", 0.75),
        ("broadcast", 1.0),
        ("reduce", 1.0),
        ("sendrecv", 1.0),
    ],
)
def test_bus_bandwidth_factors(op, busbw):
    assert bandwidths(op, 10**9, 1.0, 4) == pytest.approx((1.0, busbw))
    algbw, _ = bandwidths(op, 10**9, 0.5, 4)
    assert algbw == pytest.approx(2.0)  # GB/s, 1e9 bytes


def test_one_rank_moves_nothing_across_the_bus():
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        assert bandwidths(op, 10**9, 1.0, 1) == (1.0, 0.0)


@pytest.mark.parametrize(
    "op, size, elsize, n, expected",
    [
        # (count column, send elements, receive elements, size_bytes)
        ("all_reduce", 1024, 4, 2, (256, 256, 256, 1024)),
        ("all_reduce", 1024, 2, 8, (512, 512, 512, 1024)),
        ("all_gather", 1024, 4, 2, (128, 128, 256, 1024)),  # size is the output
        ("reduce_scatter", 1024, 4, 2, (128, 256, 128, 1024)),  # size is the input
        ("all_to_all", 1024, 4, 2, (128, 256, 256, 1024)),
        # nccl-tests rounds the per-rank count down to 16 bytes: 256 // 3 = 85 -> 84 floats
        ("all_to_all", 1024, 4, 3, (84, 252, 252, 1008)),
        ("all_gather", 1024, 4, 3, (84, 84, 252, 1008)),
        ("reduce_scatter", 1024, 2, 3, (168, 504, 168, 1008)),
        ("all_gather", 96, 2, 2, (24, 24, 48, 96)),
        ("broadcast", 1000, 2, 4, (500, 500, 500, 1000)),
        ("reduce", 6, 4, 4, (1, 1, 1, 4)),
        ("sendrecv", 4096, 4, 2, (1024, 1024, 1024, 4096)),
    ],
)
def test_layout_counts_like_nccl_tests(op, size, elsize, n, expected):
    lay = layout(op, size, elsize, n)
    assert (lay.count, lay.send, lay.recv, lay.size_bytes) == expected


def test_sizes_without_an_element_are_skipped():
    assert layout("all_gather", 4, 4, 2) is None  # 1 element over 2 ranks
    assert layout("all_gather", 16, 4, 2) is None  # 8 bytes per rank: below 16
    assert layout("all_to_all", 32, 4, 2).count == 4
    assert layout("all_reduce", 2, 4, 2) is None
    assert layout("all_reduce", 4, 4, 2).count == 1


def test_unknown_op_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown collective 'allreduce': allowed all_reduce, "):
        layout("allreduce", 1024, 4, 2)


# ---------------------------------------------------------------- exact inputs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 64, 300, 3000])
def test_sums_are_exact_in_the_dtype(dtype, n):
    peers = Participant(0, n, CPU, dtype)
    index = torch.arange(max(50, 2 * n))
    brute = sum(col.value(r, index, peers) for r in range(n))
    assert torch.equal(col.value_sum(index, peers), brute)
    assert brute.max() <= col.EXACT_INTEGERS[dtype]
    assert torch.equal(brute.to(dtype).double(), brute)  # no rounding in the dtype
    values = col.value(n - 1, index, peers)
    assert values.min() >= 0 and len(values.unique()) > 1  # checks something


# ---------------------------------------------------------------- the document


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"ops": ["all_reduce", "allgather"]}, "field 'ops' has 'allgather': allowed all_reduce"),
        ({"ops": []}, "field 'ops' is empty"),
        ({"dtype": "fp8"}, "field 'dtype' is 'fp8': allowed fp32, fp16, bf16"),
        ({"device": "tpu"}, "field 'device' is 'tpu': allowed cpu, cuda"),
        ({"iters": 0}, "field 'iters' is 0: at least 1"),
        ({"warmup": -1}, "field 'warmup' is -1: at least 0"),
        ({"factor": 1}, "factor must be at least 2, got 1"),
        ({"kind": "gemm"}, "field 'kind' is 'gemm': allowed collective"),
        ({"itres": 3}, "unknown fields itres: allowed ops, "),
        ({"ops": "all_reduce"}, "field 'ops' is 'all_reduce': a list of collectives"),
        ({"max_bytes": "8M"}, "field 'max_bytes' is '8M': a whole number"),
        ({"timeout_s": 0}, "field 'timeout_s' is 0: seconds above 0, or null"),
    ],
)
def test_document_is_checked_field_by_field(fields, message):
    with pytest.raises(ValueError, match=message):
        Sweep.from_document(document(**fields))


def test_document_round_trip():
    doc = document(ops=["all_reduce"])
    assert Sweep.from_document(doc).to_dict() == doc
    missing = {k: v for k, v in doc.items() if k != "iters"}
    with pytest.raises(ValueError, match="missing fields iters"):
        Sweep.from_document(missing)


# ---------------------------------------------------------------- in one process


@pytest.fixture
def one_rank():
    """A gloo process group of one rank in this process."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield Participant(0, 1, CPU, torch.float32)
    dist.destroy_process_group()


def test_checking_catches_a_collective_that_does_nothing(one_rank):
    lay = layout("all_gather", 1024, 4, 1)
    assert col.measure(COLLECTIVES["all_gather"], lay, False, one_rank, 0, 1)[1] == 0
    broken = dataclasses.replace(COLLECTIVES["all_gather"], run=lambda b, p: None)
    time_s, wrong = col.measure(broken, lay, False, one_rank, 1, 3)
    assert wrong == lay.recv and time_s >= 0  # the receive buffer still holds the sentinel


def test_in_place_buffers_sit_at_nccl_tests_offsets():
    peers = Participant(1, 4, CPU, torch.float32)
    gather = col.allocate(layout("all_gather", 1024, 4, 4), peers, in_place=True)
    assert gather.recv.numel() == 256 and gather.send.numel() == 64
    assert gather.send.data_ptr() == gather.recv.data_ptr() + 64 * 4  # rank 1's slice
    scatter = col.allocate(layout("reduce_scatter", 1024, 4, 4), peers, in_place=True)
    assert scatter.recv.data_ptr() == scatter.send.data_ptr() + 64 * 4
    reduce = col.allocate(layout("all_reduce", 1024, 4, 4), peers, in_place=True)
    assert reduce.send is reduce.recv
    apart = col.allocate(layout("all_gather", 1024, 4, 4), peers, in_place=False)
    assert apart.send.data_ptr() != apart.recv.data_ptr()


def columns(line):
    return " ".join(line.split())


def test_table_reads_like_nccl_tests():
    rows = [
        {"op": "all_gather", "size_bytes": 1024, "count": 128, "dtype": "fp32"}
        | {"in_place": ip, "time_us": t, "algbw_gbps": 1.0, "busbw_gbps": b, "wrong": 0}
        for ip, t, b in ((False, 12.5, 0.5), (True, 150.25, 1.5))
    ]
    rows.append(
        {"op": "all_reduce", "size_bytes": 1024, "count": 256, "dtype": "bf16", "redop": "sum"}
        | {"in_place": True, "time_us": 12345.0, "algbw_gbps": 2.0, "busbw_gbps": 2.0, "wrong": 3}
    )
    text = format_table(rows, 2, "gloo", {"sendrecv": "needs 2 ranks"})
    lines = text.splitlines()
    header = next(line for line in lines if "size" in line and "count" in line)
    assert header == (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong"
    )  # nccl-tests' header, character for character
    assert lines[lines.index(header) - 1].index("out-of-place") == 63
    gather = next(line for line in lines if "float" in line)
    assert columns(gather) == "1024 128 float none -1 12.50 1.00 0.50 0 150.2 1.00 1.50 0"
    assert header.index("time") + 4 == gather.index("12.50") + 5  # right-aligned together
    assert len(gather) == len(header)
    reduce = next(line for line in lines if "bfloat16" in line)
    assert columns(reduce) == "1024 256 bfloat16 sum -1 -- -- -- -- 12345 2.00 2.00 3"
    assert "# Avg bus bandwidth    : 1" in lines and "# Avg bus bandwidth    : 2" in lines
    assert "# sendrecv skipped: needs 2 ranks" in lines


# ---------------------------------------------------------------- real torchrun jobs


def torchrun(tmp_path, nproc, doc):
    doc_path, out_path = tmp_path / "doc.json", tmp_path / "out.json"
    doc_path.write_text(json.dumps(doc))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", str(nproc), "-m", "trainperf.launch.worker"]
    done = subprocess.run(
        [*command, str(doc_path), str(out_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(out_path.read_text())
    assert result["status"] == "ok", result["error"]
    metrics, device = result["metrics"], result["device"]
    table = format_table(
        metrics["rows"], device["world_size"], device["backend"], metrics["skipped"]
    )
    return result, table


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_every_collective_on_two_gloo_ranks(tmp_path, dtype):
    result, stdout = torchrun(tmp_path, 2, document(dtype=dtype))
    metrics, device = result["metrics"], result["device"]
    assert device["backend"] == "gloo" and device["world_size"] == 2
    assert metrics["wrong_total"] == 0 and metrics["skipped"] == {}
    rows = metrics["rows"]
    assert all(r["wrong"] == 0 and r["time_us"] > 0 for r in rows)
    variants = {(r["op"], r["in_place"]) for r in rows}
    assert variants == {(op, in_place) for op, c in COLLECTIVES.items() for in_place in c.in_place}
    assert {r["size_bytes"] for r in rows} == {1024, 4096, 16384}
    for r in rows:
        assert (r["algbw_gbps"], r["busbw_gbps"]) == pytest.approx(
            bandwidths(r["op"], r["size_bytes"], r["time_us"] / 1e6, 2)
        )
    gather = next(r for r in rows if r["op"] == "all_gather" and r["size_bytes"] == 1024)
    assert gather["count"] == {"fp32": 128, "bf16": 256}[dtype]  # per rank, as nccl-tests
    reduce = next(r for r in rows if r["op"] == "reduce")
    assert reduce["redop"] == "sum" and reduce["root"] == 0
    assert set(metrics["avg_busbw_gbps"]) == set(ALL_OPS)
    assert all(r["dtype"] == dtype for r in rows)
    assert "# Avg bus bandwidth" in stdout and "all_to_all" in stdout


def test_one_rank_reports_zero_bus_bandwidth_and_skips_sendrecv(tmp_path):
    doc = document(dtype="fp16", max_bytes=4096)
    result, _ = torchrun(tmp_path, 1, doc)
    metrics = result["metrics"]
    assert metrics["wrong_total"] == 0 and result["device"]["world_size"] == 1
    assert "sendrecv" in metrics["skipped"] and "this job has 1" in metrics["skipped"]["sendrecv"]
    assert "sendrecv" not in metrics["avg_busbw_gbps"]
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        assert metrics["avg_busbw_gbps"][op] == 0.0
    for op in ("broadcast", "reduce"):
        assert metrics["avg_busbw_gbps"][op] > 0
    assert all(r["dtype"] == "fp16" for r in metrics["rows"])
