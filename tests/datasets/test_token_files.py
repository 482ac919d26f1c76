import numpy as np
import pytest
import torch

from trainperf import models
from trainperf.datasets import DataError, make_loaders
from trainperf.datasets.tokens import token_splits

GPT2 = models.get("gpt2-small")


def test_windows_do_not_overlap_and_targets_are_shifted_by_one(tmp_path):
    np.arange(100, dtype="<u2").tofile(tmp_path / "corpus.bin")
    train, held_out = token_splits(tmp_path / "corpus.bin", seq_len=9, vocab_size=50257)
    assert len(train) + len(held_out) == 10  # 100 tokens in windows of 10
    assert (len(train), len(held_out)) == (9, 1)  # the last 5% (at least one) held out
    inputs, targets = train[2]
    assert inputs.dtype == torch.int64 and inputs.tolist() == list(range(20, 29))
    assert targets.tolist() == list(range(21, 30))
    assert held_out[0][0].tolist() == list(range(90, 99))


def test_npy_files_and_a_val_sibling(tmp_path):
    np.save(tmp_path / "train.npy", np.arange(50, dtype=np.int32))
    np.arange(1000, 1025, dtype="<u2").tofile(tmp_path / "val.bin")
    train, val = token_splits(tmp_path / "train.npy", seq_len=4, vocab_size=50257)
    assert len(train) == 10 and len(val) == 5  # no windows held out of train
    assert val[1][0].tolist() == [1005, 1006, 1007, 1008]
    assert train[9][1].tolist() == [46, 47, 48, 49]


def test_ids_outside_the_vocabulary_and_bad_files(tmp_path):
    np.array([1, 2, 3, 50257, 4], dtype="<u2").tofile(tmp_path / "t.bin")
    with pytest.raises(
        DataError, match=r"t.bin: token id 50257 is outside the vocabulary 0..50256"
    ):
        token_splits(tmp_path / "t.bin", seq_len=2, vocab_size=50257)
    with pytest.raises(DataError, match="fewer than one window of seq_len \\+ 1 = 9"):
        token_splits(tmp_path / "t.bin", seq_len=8, vocab_size=60000)
    (tmp_path / "odd.bin").write_bytes(b"abc")
    with pytest.raises(DataError, match="odd.bin: an odd number of bytes"):
        token_splits(tmp_path / "odd.bin", seq_len=1, vocab_size=10)
    np.save(tmp_path / "f.npy", np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(DataError, match="f.npy: token ids must be a 1-D integer array"):
        token_splits(tmp_path / "f.npy", seq_len=1, vocab_size=10)
    with pytest.raises(DataError, match="a token file is .bin \\(uint16\\) or .npy, not '.txt'"):
        token_splits(tmp_path / "t.txt", seq_len=1, vocab_size=10)


def test_loaders_feed_causal_language_models_only(tmp_path):
    np.arange(200, dtype="<u2").tofile(tmp_path / "c.bin")
    loaders = make_loaders(f"tokens:{tmp_path}/c.bin", GPT2, 7, 4, 0, "cpu", seed=0)
    assert loaders.size == 7 and loaders.num_classes is None
    assert (loaders.train_samples, loaders.eval_samples) == (23, 2)
    inputs, targets = next(iter(loaders.train))
    assert inputs.shape == targets.shape == (4, 7)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])
    with pytest.raises(DataError, match="token files feed causal language models .* bert-squad"):
        make_loaders(f"tokens:{tmp_path}/c.bin", models.get("bert-squad"), 7, 4, 0, "cpu", 0)
