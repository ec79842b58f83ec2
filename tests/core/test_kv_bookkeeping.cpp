// KV bookkeeping without tensors: BlockPool, KvBookkeeping, EvictionPlan. The randomised cases
// replay append/apply sequences against a brute-force model (per-head lists of entries) and a
// simulated storage (slot -> entry id) to which the returned moves are applied one by one.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "trimkv/core/error.h"
#include "trimkv/core/eviction_plan.h"
#include "trimkv/core/kv_bookkeeping.h"

using namespace trimkv;
using Catch::Matchers::Contains;

namespace {

int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

// Brute-force model of one cache: per stream, the entries in cache order and a unique id per
// entry; plus a simulated storage (slot -> id) driven only by append's slots and apply's moves.
struct Model {
  KvGeometry g;
  std::vector<std::vector<EntryMeta>> meta;  // [n_streams][len]
  std::vector<std::vector<int64_t>> ids;     // [n_streams][len]
  std::vector<int64_t> storage;              // [capacity * block_size] slot -> id (-1 empty)
  std::vector<int32_t> first;                // [n_streams] row of entry 0 in the first block
  int64_t next_id = 0;

  explicit Model(const KvGeometry& geometry)
      : g(geometry), meta(geometry.n_streams()), ids(geometry.n_streams()), first(geometry.n_streams(), 0) {}
  int stream(int il, int h) const { return il * g.n_kv_head + h; }
};

void check_against_model(const KvBookkeeping& kv, const Model& m) {
  kv.check_invariants();
  const BlockPool& pool = kv.pool();
  REQUIRE(pool.n_free() + pool.n_used() == pool.capacity());
  REQUIRE(pool.peak_used() >= pool.n_used());
  int64_t total = 0;
  std::set<int32_t> seen_blocks;
  for (int il = 0; il < m.g.n_layer; ++il) {
    for (int h = 0; h < m.g.n_kv_head; ++h) {
      const int s = m.stream(il, h);
      const int32_t len = static_cast<int32_t>(m.meta[s].size());
      REQUIRE(kv.length(il, h) == len);
      REQUIRE(kv.entries(il, h) == m.meta[s]);
      REQUIRE(kv.first_row(il, h) == m.first[s]);
      REQUIRE(static_cast<int32_t>(kv.block_table(il, h).size()) == ceil_div(m.first[s] + len, m.g.block_size));
      for (int32_t b : kv.block_table(il, h)) {
        REQUIRE(pool.is_used(b));
        REQUIRE(seen_blocks.insert(b).second);  // each used block belongs to one stream only
      }
      for (int32_t e = 0; e < len; ++e) {
        const int32_t slot = kv.slot(il, h, e);
        REQUIRE(slot >= 0);
        REQUIRE(slot < static_cast<int32_t>(m.storage.size()));
        REQUIRE(m.storage[slot] == m.ids[s][e]);  // storage really holds this entry
      }
      total += len;
    }
  }
  REQUIRE(static_cast<int32_t>(seen_blocks.size()) == pool.n_used());
  REQUIRE(kv.total_entries() == total);
  REQUIRE(kv.n_blocks_used() == pool.n_used());
}

void random_append(KvBookkeeping& kv, Model& m, std::mt19937& rng, int32_t& next_token) {
  const int il = std::uniform_int_distribution<int>(0, m.g.n_layer - 1)(rng);
  const int n = std::uniform_int_distribution<int>(0, 3 * m.g.block_size + 2)(rng);
  std::vector<int32_t> tokens(n);
  for (auto& t : tokens) t = next_token++;
  std::vector<float> log_beta;
  if (rng() % 4 != 0) {
    std::uniform_real_distribution<float> lb(-3.0f, 0.0f);
    log_beta.resize(static_cast<size_t>(n) * m.g.n_kv_head);
    for (auto& x : log_beta) x = (rng() % 5 == 0) ? 0.0f : lb(rng);
  }
  const std::vector<int32_t> slots = kv.append(il, tokens, log_beta);
  REQUIRE(slots.size() == static_cast<size_t>(n) * m.g.n_kv_head);
  m.storage.resize(static_cast<size_t>(kv.pool().capacity()) * m.g.block_size, -1);
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < m.g.n_kv_head; ++h) {
      const int s = m.stream(il, h);
      const float lb = log_beta.empty() ? 0.0f : log_beta[t * m.g.n_kv_head + h];
      m.meta[s].push_back(EntryMeta{tokens[t], lb});
      m.ids[s].push_back(m.next_id);
      m.storage[slots[t * m.g.n_kv_head + h]] = m.next_id++;
    }
  }
}

// A random plan mixing keep-all, keep-none, prefixes, suffixes and random subsets.
EvictionPlan random_plan(const KvBookkeeping& kv, std::mt19937& rng) {
  const KvGeometry& g = kv.geometry();
  EvictionPlan plan(g.n_layer, g.n_kv_head);
  for (int il = 0; il < g.n_layer; ++il) {
    for (int h = 0; h < g.n_kv_head; ++h) {
      const int32_t len = kv.length(il, h);
      std::vector<int32_t>& keep = plan.keep(il, h);
      const int mode = static_cast<int>(rng() % 5);
      const int32_t cut = len == 0 ? 0 : static_cast<int32_t>(rng() % (len + 1));
      for (int32_t e = 0; e < len; ++e) {
        bool k = false;
        switch (mode) {
          case 0:
            k = true;
            break;
          case 1:
            k = false;
            break;
          case 2:
            k = e < cut;
            break;
          case 3:
            k = e >= cut;
            break;
          default:
            k = rng() % 3 == 0;
            break;
        }
        if (k) keep.push_back(e);
      }
    }
  }
  return plan;
}

void random_apply(KvBookkeeping& kv, Model& m, std::mt19937& rng,
                  Compaction compaction = Compaction::kPreserveOrder) {
  const EvictionPlan plan = random_plan(kv, rng);
  const KvGeometry& g = m.g;
  // Expected: kept entries in their relative order. Each head is compacted toward the end that
  // moves fewer rows (the front on a tie, or when the end would hold more blocks): toward the
  // front it keeps the prefix of its block table it needs, toward the end the suffix, its first
  // row moving on by the entries dropped. With Compaction::kFillFromTail the front may instead
  // fill its holes (the first `kept` positions not kept, ascending) with the kept entries behind
  // them (ascending), when that moves fewer rows than keeping the order.
  struct Expect {
    std::vector<int32_t> table;
    int32_t first = 0;
    int32_t moves = 0;
    std::vector<int32_t> order;  // entry j after apply = entry order[j] before
  };
  std::vector<std::vector<int32_t>> tables_before;
  std::vector<Expect> expect;
  int32_t expected_freed = 0, expected_moves = 0;
  int64_t expected_evicted = 0;
  for (int il = 0; il < g.n_layer; ++il)
    for (int h = 0; h < g.n_kv_head; ++h) {
      const int s = m.stream(il, h);
      const std::vector<int32_t>& table = kv.block_table(il, h);
      tables_before.push_back(table);
      const std::vector<int32_t>& keep = plan.keep(il, h);
      const int32_t len = kv.length(il, h), kept = static_cast<int32_t>(keep.size()), shift = len - kept;
      int32_t to_front = 0, to_back = 0;
      for (int32_t j = 0; j < kept; ++j) {
        to_front += keep[j] != j;
        to_back += keep[j] != shift + j;
      }
      const int32_t blocks_front = ceil_div(m.first[s] + kept, g.block_size);
      const int32_t blocks_back = ceil_div((m.first[s] + shift) % g.block_size + kept, g.block_size);
      std::vector<int32_t> holes, behind, filled;
      for (int32_t p = 0; p < kept; ++p)
        if (!std::binary_search(keep.begin(), keep.end(), p)) holes.push_back(p);
      for (int32_t e : keep)
        if (e >= kept) behind.push_back(e);
      REQUIRE(holes.size() == behind.size());
      const int32_t n_fill = static_cast<int32_t>(holes.size());
      const bool fill = compaction == Compaction::kFillFromTail && n_fill < to_front;
      Expect x;
      x.order = keep;
      if (kept == 0) {
        x.first = 0;
      } else if (to_back < (fill ? n_fill : to_front) && blocks_back <= blocks_front) {
        const int32_t first = m.first[s] + shift;
        x.table.assign(table.begin() + first / g.block_size, table.end());
        x.first = first % g.block_size;
        x.moves = to_back;
      } else {
        x.table.assign(table.begin(), table.begin() + ceil_div(m.first[s] + kept, g.block_size));
        x.first = m.first[s];
        x.moves = to_front;
        if (fill) {
          x.moves = n_fill;
          x.order.assign(static_cast<size_t>(kept), -1);
          for (int32_t e : keep)
            if (e < kept) x.order[static_cast<size_t>(e)] = e;
          for (int32_t i = 0; i < n_fill; ++i) x.order[static_cast<size_t>(holes[i])] = behind[i];
        }
      }
      expected_freed += static_cast<int32_t>(table.size() - x.table.size());
      expected_moves += x.moves;
      expected_evicted += shift;
      expect.push_back(x);
    }
  const int32_t used_before = kv.pool().n_used();
  const int32_t capacity_before = kv.pool().capacity();

  const ApplyResult r = kv.apply(plan, {}, compaction);

  REQUIRE(r.n_blocks_freed == expected_freed);
  REQUIRE(r.n_evicted == expected_evicted);
  REQUIRE(static_cast<int32_t>(r.moves.size()) == expected_moves);
  REQUIRE(r.stream_moves.size() == static_cast<size_t>(g.n_streams()) + 1);
  REQUIRE(r.stream_moves.back() == r.moves.size());
  REQUIRE(kv.pool().n_used() == used_before - expected_freed);
  REQUIRE(kv.pool().capacity() == capacity_before);
  for (int il = 0; il < g.n_layer; ++il)
    for (int h = 0; h < g.n_kv_head; ++h) {
      const int s = m.stream(il, h);
      REQUIRE(r.stream_moves[s + 1] - r.stream_moves[s] == static_cast<size_t>(expect[s].moves));
      const std::vector<int32_t>& before = tables_before[s];
      REQUIRE(kv.block_table(il, h) == expect[s].table);
      REQUIRE(kv.first_row(il, h) == expect[s].first);
      for (int32_t b : before)
        if (std::find(expect[s].table.begin(), expect[s].table.end(), b) == expect[s].table.end())
          REQUIRE_FALSE(kv.pool().is_used(b));
      m.first[s] = expect[s].first;
      std::vector<EntryMeta> meta;
      std::vector<int64_t> ids;
      for (int32_t e : expect[s].order) {
        meta.push_back(m.meta[s][e]);
        ids.push_back(m.ids[s][e]);
      }
      m.meta[s] = meta;
      m.ids[s] = ids;
    }
  // Execute the moves one by one, in place, on the simulated storage.
  for (const SlotMove& mv : r.moves) {
    REQUIRE(mv.dst_slot != mv.src_slot);
    m.storage[mv.dst_slot] = m.storage[mv.src_slot];
  }
}

}  // namespace

// --- BlockPool ---------------------------------------------------------------------------------

TEST_CASE("BlockPool doubles its capacity when empty and reports that it grew", "[cache]") {
  BlockPool pool;
  REQUIRE(pool.capacity() == 0);
  std::vector<int32_t> expected_capacity = {1, 2, 4, 4, 8, 8, 8, 8, 16};
  std::set<int32_t> ids;
  for (size_t i = 0; i < expected_capacity.size(); ++i) {
    const int32_t cap_before = pool.capacity();
    const BlockPool::Allocation a = pool.allocate();
    CHECK(a.grew == (pool.capacity() != cap_before));
    CHECK(pool.capacity() == expected_capacity[i]);
    CHECK(ids.insert(a.block_id).second);
    CHECK(a.block_id < pool.capacity());
    CHECK(pool.n_used() == static_cast<int32_t>(i + 1));
    CHECK(pool.n_free() + pool.n_used() == pool.capacity());
  }
  CHECK(pool.peak_used() == 9);
}

TEST_CASE("BlockPool hands out the lowest new id after growing and reuses released blocks",
          "[cache]") {
  BlockPool pool(4);
  CHECK(pool.capacity() == 4);
  for (int32_t i = 0; i < 4; ++i) {
    const BlockPool::Allocation a = pool.allocate();
    CHECK(a.block_id == i);
    CHECK_FALSE(a.grew);
  }
  pool.release(2);
  CHECK(pool.n_free() == 1);
  CHECK_FALSE(pool.is_used(2));
  CHECK(pool.allocate().block_id == 2);  // reused, no growth
  CHECK(pool.capacity() == 4);
  const BlockPool::Allocation a = pool.allocate();
  CHECK(a.grew);
  CHECK(a.block_id == 4);
  CHECK(pool.capacity() == 8);
}

TEST_CASE("BlockPool::release rejects double release and unknown ids as internal errors",
          "[cache]") {
  BlockPool pool(2);
  const int32_t b = pool.allocate().block_id;
  pool.release(b);
  try {
    pool.release(b);
    FAIL("double release was accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Internal);
    CHECK_THAT(e.what(), Contains("not in use"));
  }
  CHECK_THROWS_AS(pool.release(7), Error);
  CHECK_THROWS_AS(pool.release(-1), Error);
}

TEST_CASE("BlockPool::release_all frees every block and keeps capacity and peak", "[cache]") {
  BlockPool pool;
  for (int i = 0; i < 5; ++i) pool.allocate();
  pool.release_all();
  CHECK(pool.n_used() == 0);
  CHECK(pool.n_free() == 8);
  CHECK(pool.capacity() == 8);
  CHECK(pool.peak_used() == 5);
  pool.reset_peak();
  CHECK(pool.peak_used() == 0);
  CHECK(pool.allocate().block_id == 0);
}

// --- KvBookkeeping -----------------------------------------------------------------------------

TEST_CASE("KvBookkeeping::append returns the slot of each new entry per head", "[cache]") {
  KvBookkeeping kv(KvGeometry{2, 2, 8, 4});
  const std::vector<float> log_beta = {-0.1f, -0.2f, -0.3f, -0.4f, -0.5f,
                                       -0.6f, -0.7f, -0.8f, -0.9f, -1.0f};  // [5, 2]
  const std::vector<int32_t> slots = kv.append(1, {0, 1, 2, 3, 4}, log_beta);
  REQUIRE(slots.size() == 10);
  for (int t = 0; t < 5; ++t) {
    for (int h = 0; h < 2; ++h) {
      CHECK(slots[t * 2 + h] == kv.slot(1, h, t));
      CHECK(kv.entries(1, h)[t].token_index == t);
      CHECK(kv.entries(1, h)[t].log_beta == log_beta[t * 2 + h]);
    }
  }
  CHECK(kv.length(1, 0) == 5);
  CHECK(kv.length(0, 0) == 0);
  CHECK(kv.block_table(1, 0).size() == 2);
  CHECK(kv.block_table(1, 1).size() == 2);
  CHECK(kv.n_blocks_used() == 4);
  CHECK(kv.total_entries() == 10);
  // Entries of one block are consecutive slots of that block.
  CHECK(kv.slot(1, 0, 1) == kv.slot(1, 0, 0) + 1);
  CHECK(kv.slot(1, 0, 4) == kv.block_table(1, 0)[1] * 4);
  kv.check_invariants();
}

TEST_CASE("KvBookkeeping::append with no log_beta means never forget", "[cache]") {
  KvBookkeeping kv(KvGeometry{1, 3, 8, 16});
  kv.append(0, {5, 6});
  for (int h = 0; h < 3; ++h)
    for (const EntryMeta& e : kv.entries(0, h)) CHECK(e.log_beta == 0.0f);
}

TEST_CASE("KvBookkeeping::append rejects bad input and changes nothing", "[cache]") {
  KvBookkeeping kv(KvGeometry{2, 2, 8, 4});
  kv.append(0, {0, 1});
  const int32_t used = kv.n_blocks_used();
  CHECK_THROWS_WITH(kv.append(0, {2}, {-0.5f}), Contains("[n_new, n_kv_head]"));
  CHECK_THROWS_WITH(kv.append(0, {2}, {-0.5f, 0.5f}), Contains("<= 0"));
  CHECK_THROWS_WITH(kv.append(0, {2}, {-0.5f, std::numeric_limits<float>::quiet_NaN()}),
                    Contains("not NaN"));
  CHECK_THROWS_WITH(kv.append(2, {2}), Contains("layer 2"));
  CHECK_THROWS_WITH(kv.append(0, {-3}), Contains("negative"));
  CHECK(kv.length(0, 0) == 2);
  CHECK(kv.length(0, 1) == 2);
  CHECK(kv.n_blocks_used() == used);
  kv.check_invariants();
}

TEST_CASE("KvBookkeeping rejects a non-positive geometry", "[cache]") {
  CHECK_THROWS_AS(KvBookkeeping(KvGeometry{0, 2, 8, 4}), Error);
  CHECK_THROWS_AS(KvBookkeeping(KvGeometry{1, 2, 8, 0}), Error);
}

TEST_CASE("KvBookkeeping::apply frees exactly the tail blocks of a shrunk head", "[cache]") {
  KvBookkeeping kv(KvGeometry{1, 2, 8, 4});
  std::vector<int32_t> tokens(10);
  for (int i = 0; i < 10; ++i) tokens[i] = i;
  kv.append(0, tokens);  // each head: 10 entries in 3 blocks
  REQUIRE(kv.n_blocks_used() == 6);
  const std::vector<int32_t> head0 = kv.block_table(0, 0);
  const std::vector<int32_t> head1 = kv.block_table(0, 1);

  EvictionPlan plan = EvictionPlan::keep_all(kv);
  plan.keep(0, 0) = {0, 4, 5};  // 3 entries: 1 block; 2 rows move toward the front, 3 toward the end
  const int32_t free_before = kv.pool().n_free();
  const ApplyResult r = kv.apply(plan);

  CHECK(r.n_blocks_freed == 2);
  CHECK(r.n_evicted == 7);
  CHECK(kv.n_blocks_used() == 4);
  CHECK(kv.pool().n_free() == free_before + 2);
  CHECK(kv.block_table(0, 0) == std::vector<int32_t>{head0[0]});
  CHECK(kv.first_row(0, 0) == 0);
  CHECK_FALSE(kv.pool().is_used(head0[1]));
  CHECK_FALSE(kv.pool().is_used(head0[2]));
  CHECK(kv.block_table(0, 1) == head1);  // untouched head
  // Kept entries keep their metadata, in order, compacted to the front.
  REQUIRE(kv.length(0, 0) == 3);
  CHECK(kv.entries(0, 0)[0].token_index == 0);
  CHECK(kv.entries(0, 0)[1].token_index == 4);
  CHECK(kv.entries(0, 0)[2].token_index == 5);
  // Moves: 4 -> 1, 5 -> 2 (slots of head 0 only).
  REQUIRE(r.moves.size() == 2);
  CHECK(r.moves[0].src_slot == head0[1] * 4 + 0);
  CHECK(r.moves[0].dst_slot == head0[0] * 4 + 1);
  CHECK(r.moves[1].src_slot == head0[1] * 4 + 1);
  CHECK(r.moves[1].dst_slot == head0[0] * 4 + 2);
  kv.check_invariants();

  // Freed blocks are reused by the next append before the pool grows.
  const int32_t capacity = kv.pool().capacity();
  kv.append(0, {10, 11, 12, 13, 14, 15, 16, 17, 18});  // head 0: 12 entries = 3 blocks
  CHECK(kv.pool().capacity() == capacity);
  kv.check_invariants();
}

TEST_CASE("KvBookkeeping::apply: evicting the oldest entries moves no row; the head starts further into its blocks",
          "[cache]") {
  KvBookkeeping kv(KvGeometry{1, 1, 8, 4});
  std::vector<int32_t> tokens(10);
  for (int i = 0; i < 10; ++i) tokens[i] = i;
  kv.append(0, tokens);  // 10 entries in 3 blocks
  const std::vector<int32_t> table = kv.block_table(0, 0);
  EvictionPlan plan(1, 1);
  plan.keep(0, 0) = {5, 6, 7, 8, 9};
  const ApplyResult r = kv.apply(plan);
  CHECK(r.moves.empty());
  CHECK(r.n_blocks_freed == 1);  // block 0 held entries 0-3 only
  CHECK(kv.block_table(0, 0) == std::vector<int32_t>{table[1], table[2]});
  CHECK(kv.first_row(0, 0) == 1);  // entry 0 (token 5) is row 1 of the old block 1
  CHECK(kv.slot(0, 0, 0) == table[1] * 4 + 1);
  CHECK(kv.slot(0, 0, 4) == table[2] * 4 + 1);
  CHECK_FALSE(kv.pool().is_used(table[0]));
  // Appends go on after the last row; a new block starts at row 3 of entries.
  const std::vector<int32_t> slots = kv.append(0, {10, 11, 12});
  CHECK(slots[0] == table[2] * 4 + 2);
  CHECK(slots[1] == table[2] * 4 + 3);
  CHECK(kv.block_table(0, 0).size() == 3);
  CHECK(slots[2] == kv.block_table(0, 0)[2] * 4 + 0);
  CHECK(kv.entries(0, 0)[5].token_index == 10);
  kv.check_invariants();
  // A scattered plan afterwards (front is cheaper: keep 0, 1 of 8) keeps the first row.
  EvictionPlan plan2(1, 1);
  plan2.keep(0, 0) = {0, 1, 6};
  const ApplyResult r2 = kv.apply(plan2);
  CHECK(r2.moves.size() == 1);
  CHECK(kv.first_row(0, 0) == 1);
  CHECK(kv.block_table(0, 0) == std::vector<int32_t>{table[1]});
  CHECK(kv.entries(0, 0)[2].token_index == 11);
  kv.check_invariants();
  // Emptied, a head starts at row 0 again.
  kv.apply(EvictionPlan(1, 1));
  CHECK(kv.first_row(0, 0) == 0);
  CHECK(kv.block_table(0, 0).empty());
  kv.check_invariants();
}

TEST_CASE("KvBookkeeping::apply of keep_all moves nothing and frees nothing", "[cache]") {
  KvBookkeeping kv(KvGeometry{2, 2, 8, 3});
  kv.append(0, {0, 1, 2, 3, 4});
  kv.append(1, {0, 1});
  const ApplyResult r = kv.apply(EvictionPlan::keep_all(kv));
  CHECK(r.moves.empty());
  CHECK(r.n_blocks_freed == 0);
  CHECK(r.n_evicted == 0);
  CHECK(kv.total_entries() == 14);
}

TEST_CASE("KvBookkeeping::apply can empty a head completely and refill it", "[cache]") {
  KvBookkeeping kv(KvGeometry{1, 1, 8, 2});
  kv.append(0, {0, 1, 2});
  const ApplyResult r = kv.apply(EvictionPlan(1, 1));  // keeps nothing
  CHECK(r.n_blocks_freed == 2);
  CHECK(kv.length(0, 0) == 0);
  CHECK(kv.block_table(0, 0).empty());
  CHECK(kv.n_blocks_used() == 0);
  kv.append(0, {3});
  CHECK(kv.length(0, 0) == 1);
  CHECK(kv.entries(0, 0)[0].token_index == 3);
  kv.check_invariants();
}

TEST_CASE("KvBookkeeping invariants hold over random append/apply sequences", "[cache]") {
  for (int seed = 0; seed < 400; ++seed) {
    std::mt19937 rng(seed);
    // Odd seeds: the order-free compaction (holes filled from the tail).
    const Compaction compaction = seed % 2 == 1 ? Compaction::kFillFromTail : Compaction::kPreserveOrder;
    const int block_sizes[] = {1, 2, 3, 4, 16};
    KvGeometry g{1 + static_cast<int>(rng() % 3), 1 + static_cast<int>(rng() % 4), 8,
                 block_sizes[rng() % 5]};
    CAPTURE(seed, g.n_layer, g.n_kv_head, g.block_size);
    KvBookkeeping kv(g, static_cast<int32_t>(rng() % 3));
    Model m(g);
    int32_t next_token = 0;
    for (int step = 0; step < 60; ++step) {
      CAPTURE(step);
      if (rng() % 3 != 0)
        random_append(kv, m, rng, next_token);
      else
        random_apply(kv, m, rng, compaction);
      check_against_model(kv, m);
    }
    // Emptying everything returns every block.
    const ApplyResult r = kv.apply(EvictionPlan(g.n_layer, g.n_kv_head));
    (void)r;
    CHECK(kv.n_blocks_used() == 0);
    CHECK(kv.pool().n_free() == kv.pool().capacity());
    CHECK(kv.total_entries() == 0);
  }
}

TEST_CASE("KvBookkeeping token stream requires consecutive token indices", "[cache]") {
  KvBookkeeping kv(KvGeometry{1, 1, 8, 4});
  std::vector<TokenInfo> tokens(3);
  for (int i = 0; i < 3; ++i) tokens[i].token_index = i;
  tokens[1].modality = Modality::Image;
  tokens[1].image_id = 0;
  tokens[1].patch_row = 2;
  tokens[1].patch_col = 5;
  kv.register_tokens(tokens);
  CHECK(kv.n_tokens() == 3);
  CHECK(kv.token(1).modality == Modality::Image);
  CHECK(kv.token(1).patch_col == 5);
  CHECK(kv.token(0).image_id == -1);
  CHECK(std::string(modality_name(kv.token(1).modality)) == "image");

  std::vector<TokenInfo> gap(1);
  gap[0].token_index = 4;
  CHECK_THROWS_WITH(kv.register_tokens(gap), Contains("expected 3, got 4"));
  CHECK(kv.n_tokens() == 3);
  CHECK_THROWS_AS(kv.token(3), Error);
  CHECK_THROWS_AS(kv.token(-1), Error);
}

TEST_CASE("KvBookkeeping::clear releases every block and forgets every token", "[cache]") {
  KvBookkeeping kv(KvGeometry{2, 2, 8, 4});
  std::vector<TokenInfo> tokens(6);
  for (int i = 0; i < 6; ++i) tokens[i].token_index = i;
  kv.register_tokens(tokens);
  kv.append(0, {0, 1, 2, 3, 4, 5});
  kv.append(1, {0, 1, 2, 3, 4, 5});
  const int32_t capacity = kv.pool().capacity();
  kv.clear();
  CHECK(kv.n_blocks_used() == 0);
  CHECK(kv.total_entries() == 0);
  CHECK(kv.n_tokens() == 0);
  CHECK(kv.pool().capacity() == capacity);
  for (int il = 0; il < 2; ++il)
    for (int h = 0; h < 2; ++h) CHECK(kv.length(il, h) == 0);
  kv.check_invariants();
}

// --- EvictionPlan ------------------------------------------------------------------------------

TEST_CASE("EvictionPlan::validate names the layer, head and index of a bad plan", "[cache]") {
  KvBookkeeping kv(KvGeometry{2, 2, 8, 4});
  kv.append(0, {0, 1, 2, 3, 4});
  kv.append(1, {0, 1, 2});

  SECTION("index out of range") {
    EvictionPlan plan = EvictionPlan::keep_all(kv);
    plan.keep(1, 1) = {0, 3};
    CHECK_THROWS_WITH(plan.validate(kv),
                      Contains("layer 1 head 1: keep index 3") && Contains("outside [0, 3)"));
  }
  SECTION("negative index") {
    EvictionPlan plan = EvictionPlan::keep_all(kv);
    plan.keep(0, 0) = {-1};
    CHECK_THROWS_WITH(plan.validate(kv), Contains("keep index -1"));
  }
  SECTION("not strictly increasing") {
    EvictionPlan plan = EvictionPlan::keep_all(kv);
    plan.keep(0, 1) = {0, 2, 1};
    CHECK_THROWS_WITH(plan.validate(kv), Contains("strictly increasing, got 2 then 1"));
  }
  SECTION("duplicate index") {
    EvictionPlan plan = EvictionPlan::keep_all(kv);
    plan.keep(0, 1) = {2, 2};
    CHECK_THROWS_WITH(plan.validate(kv), Contains("strictly increasing"));
  }
  SECTION("wrong geometry") {
    CHECK_THROWS_WITH(EvictionPlan(2, 3).validate(kv), Contains("2 layers x 3 KV heads"));
  }
  SECTION("apply of an invalid plan changes nothing") {
    EvictionPlan plan = EvictionPlan::keep_all(kv);
    plan.keep(0, 0) = {0};
    plan.keep(1, 0) = {7};
    try {
      kv.apply(plan);
      FAIL("invalid plan was applied");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::Input);
    }
    CHECK(kv.length(0, 0) == 5);
    CHECK(kv.total_entries() == 16);
    kv.check_invariants();
  }
  SECTION("head out of the plan's range") {
    EvictionPlan plan(2, 2);
    CHECK_THROWS_AS(plan.keep(2, 0), Error);
  }
}

TEST_CASE("EvictionPlan::keep_all lists every entry of every head", "[cache]") {
  KvBookkeeping kv(KvGeometry{2, 3, 8, 4});
  kv.append(0, {0, 1, 2, 3, 4});
  const EvictionPlan plan = EvictionPlan::keep_all(kv);
  CHECK(plan.n_layer() == 2);
  CHECK(plan.n_kv_head() == 3);
  CHECK(plan.n_kept() == 15);
  CHECK(plan.keep(0, 2) == std::vector<int32_t>{0, 1, 2, 3, 4});
  CHECK(plan.keep(1, 0).empty());
  plan.validate(kv);
}

TEST_CASE("KvBookkeeping::set_newest_log_beta gives the last append's entries their log beta afterwards",
          "[cache]") {
  KvGeometry g{2, 2, 8, 4};
  KvBookkeeping at_once(g), later(g);
  const std::vector<float> first = {-0.5f, -0.25f, -1.0f, -2.0f};             // [2, 2]
  const std::vector<float> second = {-0.1f, -0.2f, -0.3f, -0.4f, -0.5f, -0.6f};  // [3, 2]
  at_once.append(0, {0, 1}, first);
  at_once.append(0, {2, 3, 4}, second);
  later.append(0, {0, 1}, first);
  later.append(0, {2, 3, 4});  // log β 0 until the device's values come back
  later.set_newest_log_beta(0, second);
  for (int h = 0; h < 2; ++h) {
    REQUIRE(later.entries(0, h).size() == at_once.entries(0, h).size());
    for (size_t e = 0; e < later.entries(0, h).size(); ++e) {
      CHECK(later.entries(0, h)[e].log_beta == at_once.entries(0, h)[e].log_beta);
      CHECK(later.entries(0, h)[e].log1p_beta == at_once.entries(0, h)[e].log1p_beta);
    }
  }
  later.check_invariants();
  // Refused, nothing changed: more values than a head holds, a positive value, a ragged count.
  CHECK_THROWS_WITH(later.set_newest_log_beta(1, {-0.1f, -0.1f}), Contains("fewer than 1"));
  CHECK_THROWS_WITH(later.set_newest_log_beta(0, {-0.1f, 0.5f}), Contains("must be <= 0"));
  CHECK_THROWS_WITH(later.set_newest_log_beta(0, {-0.1f, -0.1f, -0.1f}), Contains("3 values for 2 KV heads"));
  CHECK(later.entries(0, 1).back().log_beta == -0.6f);
}
