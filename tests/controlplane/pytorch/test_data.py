"""pytorch.DataLoader: each worker's share of the batches, repeated, and resumed at any batch."""

from __future__ import annotations

import itertools

import pytest
import torch

from controlplane import pytorch


def _ids(loader: torch.utils.data.DataLoader, n: int) -> list[list[int]]:
    return [b[0].tolist() for b in itertools.islice(iter(loader), n)]


def _data(n: int = 10) -> torch.utils.data.TensorDataset:
    return torch.utils.data.TensorDataset(torch.arange(n))


def test_batches_are_dealt_to_workers_in_turn_and_repeat():
    loader = pytorch.DataLoader(_data(10), batch_size=2)
    assert len(loader) == 5
    assert _ids(loader.get_data_loader(num_replicas=2, rank=0), 9) == [[0, 1], [4, 5], [8, 9]]
    assert _ids(loader.get_data_loader(num_replicas=2, rank=1), 9) == [[2, 3], [6, 7]]
    endless = loader.get_data_loader(repeat=True, num_replicas=2, rank=1)
    assert len(endless.batch_sampler) == 2  # type: ignore[arg-type]
    assert _ids(endless, 4) == [[2, 3], [6, 7], [0, 1], [4, 5]]  # the stream continues into epoch 2


def test_skip_resumes_at_the_same_batch_for_every_worker():
    loader = pytorch.DataLoader(_data(12), batch_size=2, shuffle=True)
    for rank in range(3):
        whole = _ids(loader.get_data_loader(repeat=True, num_replicas=3, rank=rank, seed=5), 10)
        for skip in (0, 1, 2, 3, 7):
            resumed = _ids(loader.get_data_loader(repeat=True, skip=skip, num_replicas=3, rank=rank, seed=5), 3)
            assert resumed == whole[skip:skip + 3]


def test_shuffle_depends_on_seed_and_epoch_only():
    loader = pytorch.DataLoader(_data(8), batch_size=8, shuffle=True)
    torch.manual_seed(0)
    a = _ids(loader.get_data_loader(repeat=True, seed=1), 3)
    torch.manual_seed(123)  # the global RNG plays no part
    b = _ids(loader.get_data_loader(repeat=True, seed=1), 3)
    assert a == b and a[0] != a[1] and sorted(a[0]) == list(range(8))
    assert _ids(loader.get_data_loader(repeat=True, seed=2), 1) != a[:1]


def test_drop_last_and_invalid_loaders():
    assert len(pytorch.DataLoader(_data(10), batch_size=4, drop_last=True)) == 2
    assert len(pytorch.DataLoader(_data(10), batch_size=4)) == 3
    assert [b[0].tolist() for b in pytorch.DataLoader(_data(5), batch_size=2)] == [[0, 1], [2, 3], [4]]

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield 1

    with pytest.raises(ValueError, match="IterableDatasets are not supported"):
        pytorch.DataLoader(Stream())
    with pytest.raises(ValueError, match="mutually exclusive"):
        pytorch.DataLoader(_data(), shuffle=True, sampler=torch.utils.data.SequentialSampler(_data()))


def test_units():
    assert pytorch.Batch(10).should_stop(20) and not pytorch.Batch(10).should_stop(15)
    assert pytorch.Batch([3, 7]).should_stop(7) and not pytorch.Batch([3, 7]).should_stop(6)
    assert not pytorch.Batch(10).should_stop(0)
    assert pytorch.TrainUnit._from_values(records=100, global_batch_size=32) == pytorch.Batch(3)
    assert pytorch.TrainUnit._from_config({"epochs": 2}, "x", None) == pytorch.Epoch(2)
    with pytest.raises(ValueError, match="min_validation_period must be"):
        pytorch.TrainUnit._from_config({"steps": 2}, "min_validation_period", None)
