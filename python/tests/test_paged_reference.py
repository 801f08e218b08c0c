"""The paged decode reference itself (CPU): the cache layout, the visibility rule, the
bad-request rule and the project's order (NaN first, ties to the smaller position, -1
padding), on cases small enough to check by hand or by a second, token-by-token gather."""
import pytest

torch = pytest.importorskip("torch")
from winnow.testing import data, reference  # noqa: E402

nan = float("nan")


def one_block_cache(key_values, scales):
    """A cache of one block: key i is key_values[i] in every one of its 128 elements."""
    keys = torch.zeros(64, 128)
    keys[:len(key_values)] = torch.tensor(key_values)[:, None]
    s = torch.ones(64)
    s[:len(scales)] = torch.tensor(scales)
    raw = torch.cat([keys.to(torch.float8_e4m3fn).view(torch.uint8).reshape(-1),
                     s.view(torch.uint8)])
    return raw.reshape(1, 64, 1, 132)


def test_paged_keys_reads_the_engines_layout():
    cache = one_block_cache([1.0, -2.0, 3.0], [0.5, 2.0, 1.0])
    keys, scales = reference.paged_keys(cache)
    assert keys.shape == (1, 64, 128) and scales.shape == (1, 64)
    assert keys[0, :3, 5].float().tolist() == [1.0, -2.0, 3.0]
    assert scales[0, :3].tolist() == [0.5, 2.0, 1.0]


def test_visibility_of_both_length_forms():
    assert reference.paged_visible(torch.tensor([5, 1, 0]), 3).tolist() == \
        [[3, 4, 5], [0, 0, 1], [0, 0, 0]]
    assert reference.paged_visible(torch.tensor([[2, 7], [-1, 0]]), 2).tolist() == \
        [[2, 7], [0, 0]]


def single_request(key_values, lens, k, next_n=1, scales=()):
    """q all ones, one head of weight 1: key i scores 128 * relu(key_values[i]) * scale."""
    cache = one_block_cache(key_values, scales)
    q = torch.ones(1, next_n, 1, 128).to(torch.float8_e4m3fn)
    w = torch.ones(next_n, 1)
    table = torch.tensor([[0]], dtype=torch.int32)
    return reference.paged_decode_topk(q, cache, w, torch.tensor(lens, dtype=torch.int32),
                                       table, k, sorted=True)


def test_order_nan_first_ties_to_the_smaller_position_and_padding():
    values = [1.0, 3.0, nan, 3.0, 0.0, -1.0]  # scores 128, 384, NaN, 384, 0, 0 (relu)
    assert single_request(values, [6], 4).tolist() == [[2, 1, 3, 0]]
    assert single_request(values, [6], 1).tolist() == [[2]]
    assert single_request(values, [6], 6).tolist() == [[2, 1, 3, 0, 4, 5]]  # k = len
    assert single_request(values, [6], 8).tolist() == [[2, 1, 3, 0, 4, 5, -1, -1]]
    assert single_request(values, [0], 3).tolist() == [[-1, -1, -1]]  # len = 0
    # A key scale of 2 lifts key 0 (128 * 2) above nothing but keeps NaN first.
    assert single_request([1.0, 1.5, nan], [3], 3, scales=[2.0, 1.0, 1.0]).tolist() == \
        [[2, 0, 1]]


def test_next_n_queries_see_growing_prefixes():
    values = [5.0, 4.0, 3.0, 2.0]
    got = single_request(values, [4], 4, next_n=3)
    assert got.tolist() == [[0, 1, -1, -1], [0, 1, 2, -1], [0, 1, 2, 3]]
    got = single_request(values, [[1, 4, 0]], 2, next_n=3)
    assert got.tolist() == [[0, -1], [0, 1], [-1, -1]]


def test_bad_requests_see_nothing():
    q, cache, w, lens, table = data.paged_inputs([70, 10, 5], seed=1, H=2)
    good = reference.paged_decode_topk(q, cache, w, lens, table, 4)
    assert (good >= 0).all()
    table[1, 0] = cache.shape[0]  # a block outside the cache
    got = reference.paged_decode_topk(q, cache, w, lens, table, 4)
    assert (got[1] == -1).all() and torch.equal(got[[0, 2]], good[[0, 2]])
    got = reference.paged_decode_topk(q, cache, w, lens, table, 4, max_blocks_per_seq=1)
    assert (got[0] == -1).all()  # 70 keys need 2 blocks
    got = reference.paged_decode_topk(q, cache, w, torch.tensor([70, -1, 5], dtype=torch.int32),
                                      table, 4)
    assert (got[1] == -1).all()
    got = reference.paged_decode_topk(q, cache, w, lens, table, 4, max_total_keys=74)
    assert (got[2] == -1).all() and torch.equal(got[0], good[0])  # 70 + 5 > 74


def token_by_token_logits(q, cache, w, lens, table):
    """A second gather: one token at a time, each key's bytes cut out of its block."""
    B, next_n, H, _ = q.shape
    visible = reference.paged_visible(lens, next_n)
    out = torch.full((B * next_n, int(visible.max())), -7.0, dtype=torch.float64)
    for b in range(B):
        for j in range(next_n):
            for t in range(int(visible[b, j])):
                block = cache[int(table[b, t // 64])].reshape(-1)
                key = block[(t % 64) * 128:(t % 64 + 1) * 128].view(torch.float8_e4m3fn)
                scale = block[8192 + 4 * (t % 64):8192 + 4 * (t % 64) + 4].view(torch.float32)
                out[b * next_n + j, t] = reference.indexer_logits(
                    q[b, j:j + 1], key[None], scale, w[b * next_n + j:b * next_n + j + 1])[0, 0]
    return out, visible.reshape(-1)


@pytest.mark.parametrize("per_query", [False, True])
def test_logits_equal_a_token_by_token_gather(per_query):
    q, cache, w, lens, table = data.paged_inputs([0, 1, 64, 130], next_n=2, H=3, seed=4,
                                                 nan_keys=3, lens_per_query=per_query)
    logits, ends = reference.paged_decode_logits(q, cache, w, lens, table)
    want, want_ends = token_by_token_logits(q, cache, w, lens, table)
    assert torch.equal(ends, want_ends)
    for r in range(logits.shape[0]):
        e = int(ends[r])
        assert torch.equal(logits[r, :e].isnan(), want[r, :e].isnan())
        assert torch.equal(logits[r, :e].nan_to_num(), want[r, :e].nan_to_num())


def test_generated_block_tables_are_distinct_shuffled_blocks():
    q, cache, w, lens, table = data.paged_inputs([200, 64, 0], H=2, seed=2)
    assert table.shape == (3, 4) and cache.shape[1:] == (64, 1, 132)
    named = table[table >= 0]
    assert named.numel() == 4 + 1 and named.unique().numel() == named.numel()
    assert (table[1, 1:] == -1).all() and (table[2] == -1).all()
    assert q.shape == (3, 1, 2, 128) and w.shape == (3, 2) and lens.tolist() == [200, 64, 0]
