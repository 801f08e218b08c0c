"""The torch references themselves (CPU): the project's order, padding and the engines'
index bases, on cases small enough to check by hand."""
import pytest

torch = pytest.importorskip("torch")
from winnow.testing import data, reference  # noqa: E402

nan = float("nan")


def test_rank_order_nan_first_ties_to_the_smaller_index():
    scores = torch.tensor([1.0, nan, 3.0, 3.0, -0.0, 0.0, nan, -float("inf")])
    assert reference.rank_order(scores).tolist() == [1, 6, 2, 3, 0, 4, 5, 7]


def test_topk_rows_windows_padding_and_bases():
    scores = torch.tensor([[5.0, 1.0, 5.0, 2.0, 9.0], [0.0, 1.0, 2.0, 3.0, 4.0]])
    starts, ends = torch.tensor([1, 3]), torch.tensor([5, 3])  # row 1: empty window
    got = reference.topk_rows(scores, 3, starts, ends, sorted=True)
    assert got.tolist() == [[3, 1, 2], [-1, -1, -1]]  # 9 (key 4), 5 (key 2), 2 (key 3)
    got = reference.topk_rows(scores, 3, starts, ends)  # ascending, as winnow's unsorted
    assert got.tolist() == [[1, 2, 3], [-1, -1, -1]]
    got = reference.topk_rows(scores, 6, relative=False)
    assert got.tolist()[0] == [0, 1, 2, 3, 4, -1]


def test_indexer_logits_is_relu_mh():
    q = torch.tensor([[[1.0, 2.0], [-1.0, 0.0]]])  # T = 1, H = 2, d = 2
    k = torch.tensor([[1.0, 1.0], [2.0, -3.0]])
    w = torch.tensor([[0.5, 2.0]])
    scale = torch.tensor([1.0, 4.0])
    # key 0: 0.5 relu(3) + 2 relu(-1) = 1.5; key 1: (0.5 relu(-4) + 2 relu(-2)) * 4 = 0
    assert reference.indexer_logits(q, k, scale, w).tolist() == [[1.5, 0.0]]


def test_engine_bases():
    q, k, scale, w, ks, ke = data.indexer_inputs(6, 2, 64, seed=3)
    local = reference.vllm_prefill_topk(q, k, scale, w, ks, ke, topk=8)
    ragged = reference.sglang_ragged_topk(q, k, scale, w, ks, ke, topk=8)
    assert torch.equal(ragged, torch.where(local >= 0, local + ks[:, None], local))
    assert (local[0] == -1).all()  # the generator's empty window
    assert reference.selection_within(local, reference.indexer_logits(q, k, scale, w), 8, ks,
                                      ke) is None


def test_selection_within_finds_a_wrong_pick():
    scores = torch.tensor([[0.0, 5.0, 1.0, 4.0]])
    assert reference.selection_within(torch.tensor([[1, 3]]), scores, 2) is None
    assert "left out" in reference.selection_within(torch.tensor([[1, 2]]), scores, 2)
    assert "padding" in reference.selection_within(torch.tensor([[1, -1]]), scores, 2)
    assert reference.selection_within(torch.tensor([[1, 2]]), scores, 2, tol=3.0) is None


def test_exact_data_is_exact_in_fp8():
    q, k, scale, w, ks, ke = data.indexer_inputs(4, 2, 32, seed=1)
    assert torch.equal(q.float(), q.float().round()) and q.float().abs().max() <= 2
    assert set(scale.tolist()) <= {0.5, 1.0, 2.0}
