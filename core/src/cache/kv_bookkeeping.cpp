#include "trimkv/core/kv_bookkeeping.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "trimkv/core/error.h"

namespace trimkv {

namespace {
// log β values must be <= 0 and not NaN ([n, n_kv_head] layout); `what` names the caller.
void check_log_beta(const std::vector<float>& log_beta, int n_kv_head, const char* what) {
  for (size_t i = 0; i < log_beta.size(); ++i) {
    TRIMKV_CHECK(!std::isnan(log_beta[i]) && log_beta[i] <= 0.0f, Input, "KvBookkeeping::", what,
                 ": log_beta must be <= 0 and not NaN, got ", log_beta[i], " for token position ",
                 i / static_cast<size_t>(n_kv_head), " head ", i % static_cast<size_t>(n_kv_head));
  }
}
}  // namespace

const char* modality_name(Modality modality) {
  switch (modality) {
    case Modality::Text:
      return "text";
    case Modality::Image:
      return "image";
    case Modality::Special:
      return "special";
  }
  return "unknown";
}

// --- EvictionPlan ------------------------------------------------------------------------------

EvictionPlan::EvictionPlan(int n_layer, int n_kv_head)
    : m_n_layer(n_layer), m_n_kv_head(n_kv_head) {
  TRIMKV_CHECK(n_layer >= 0 && n_kv_head >= 0, Input,
               "EvictionPlan: bad geometry n_layer=", n_layer, " n_kv_head=", n_kv_head);
  m_keep.resize(static_cast<size_t>(n_layer) * static_cast<size_t>(n_kv_head));
}

EvictionPlan EvictionPlan::keep_all(const KvBookkeeping& kv) {
  const KvGeometry& g = kv.geometry();
  EvictionPlan plan(g.n_layer, g.n_kv_head);
  for (int il = 0; il < g.n_layer; ++il) {
    for (int h = 0; h < g.n_kv_head; ++h) {
      std::vector<int32_t>& keep = plan.keep(il, h);
      keep.resize(static_cast<size_t>(kv.length(il, h)));
      for (int32_t e = 0; e < kv.length(il, h); ++e) keep[static_cast<size_t>(e)] = e;
    }
  }
  return plan;
}

int EvictionPlan::stream(int il, int h) const {
  TRIMKV_CHECK(il >= 0 && il < m_n_layer && h >= 0 && h < m_n_kv_head, Input,
               "EvictionPlan: (layer ", il, ", head ", h, ") outside the plan's ", m_n_layer,
               " layers x ", m_n_kv_head, " KV heads");
  return il * m_n_kv_head + h;
}

int64_t EvictionPlan::n_kept() const {
  int64_t n = 0;
  for (const auto& k : m_keep) n += static_cast<int64_t>(k.size());
  return n;
}

void EvictionPlan::validate(const KvBookkeeping& kv) const {
  const KvGeometry& g = kv.geometry();
  TRIMKV_CHECK(m_n_layer == g.n_layer && m_n_kv_head == g.n_kv_head, Input,
               "EvictionPlan: plan is for ", m_n_layer, " layers x ", m_n_kv_head,
               " KV heads but the cache has ", g.n_layer, " x ", g.n_kv_head);
  for (int il = 0; il < m_n_layer; ++il) {
    for (int h = 0; h < m_n_kv_head; ++h) {
      const std::vector<int32_t>& keep = m_keep[static_cast<size_t>(il * m_n_kv_head + h)];
      const int32_t len = kv.length(il, h);
      for (size_t j = 0; j < keep.size(); ++j) {
        TRIMKV_CHECK(keep[j] >= 0 && keep[j] < len, Input, "EvictionPlan: layer ", il, " head ", h,
                     ": keep index ", keep[j], " (position ", j, ") outside [0, ", len, ")");
        TRIMKV_CHECK(j == 0 || keep[j] > keep[j - 1], Input, "EvictionPlan: layer ", il, " head ",
                     h, ": keep indices must be strictly increasing, got ", keep[j - 1], " then ",
                     keep[j], " at position ", j);
      }
    }
  }
}

// --- KvBookkeeping -----------------------------------------------------------------------------

int32_t KvBookkeeping::slot_of(const Stream& s, int32_t entry, int32_t bs) {
  const int32_t p = s.start + entry;
  return s.blocks[static_cast<size_t>(p / bs)] * bs + p % bs;
}

KvBookkeeping::KvBookkeeping(const KvGeometry& geometry, int32_t initial_blocks)
    : m_geometry(geometry), m_pool(initial_blocks) {
  TRIMKV_CHECK(geometry.n_layer > 0 && geometry.n_kv_head > 0 && geometry.head_dim > 0 &&
                   geometry.block_size > 0,
               Config, "KvBookkeeping: geometry must be positive, got n_layer=", geometry.n_layer,
               " n_kv_head=", geometry.n_kv_head, " head_dim=", geometry.head_dim,
               " block_size=", geometry.block_size);
  m_streams.resize(static_cast<size_t>(geometry.n_streams()));
}

KvBookkeeping::Stream& KvBookkeeping::stream(int il, int h) {
  TRIMKV_CHECK(il >= 0 && il < m_geometry.n_layer && h >= 0 && h < m_geometry.n_kv_head, Input,
               "KvBookkeeping: (layer ", il, ", head ", h, ") outside ", m_geometry.n_layer,
               " layers x ", m_geometry.n_kv_head, " KV heads");
  return m_streams[static_cast<size_t>(il * m_geometry.n_kv_head + h)];
}

const KvBookkeeping::Stream& KvBookkeeping::stream(int il, int h) const {
  return const_cast<KvBookkeeping*>(this)->stream(il, h);
}

void KvBookkeeping::register_tokens(const std::vector<TokenInfo>& tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t expected = static_cast<int64_t>(m_tokens.size()) + static_cast<int64_t>(i);
    TRIMKV_CHECK(tokens[i].token_index == expected, Input,
                 "KvBookkeeping::register_tokens: token_index must be consecutive: expected ",
                 expected, ", got ", tokens[i].token_index, " at position ", i);
  }
  m_tokens.insert(m_tokens.end(), tokens.begin(), tokens.end());
}

const TokenInfo& KvBookkeeping::token(int32_t token_index) const {
  TRIMKV_CHECK(token_index >= 0 && token_index < n_tokens(), Input,
               "KvBookkeeping::token: ", token_index, " outside the ", n_tokens(),
               " registered tokens");
  return m_tokens[static_cast<size_t>(token_index)];
}

int32_t KvBookkeeping::slot(int il, int h, int32_t entry) const {
  const Stream& s = stream(il, h);
  TRIMKV_CHECK(entry >= 0 && entry < static_cast<int32_t>(s.entries.size()), Input,
               "KvBookkeeping::slot: entry ", entry, " outside [0, ", s.entries.size(),
               ") of layer ", il, " head ", h);
  return slot_of(s, entry, m_geometry.block_size);
}

std::vector<int32_t> KvBookkeeping::append(int il, const std::vector<int32_t>& token_indices,
                                           const std::vector<float>& log_beta) {
  const int n_kv_head = m_geometry.n_kv_head;
  const int32_t bs = m_geometry.block_size;
  const size_t n = token_indices.size();
  TRIMKV_CHECK(il >= 0 && il < m_geometry.n_layer, Input, "KvBookkeeping::append: layer ", il,
               " outside [0, ", m_geometry.n_layer, ")");
  TRIMKV_CHECK(log_beta.empty() || log_beta.size() == n * static_cast<size_t>(n_kv_head), Input,
               "KvBookkeeping::append: log_beta must be empty or [n_new, n_kv_head] = ", n, " x ",
               n_kv_head, " values, got ", log_beta.size());
  for (size_t t = 0; t < n; ++t) {
    TRIMKV_CHECK(token_indices[t] >= 0, Input, "KvBookkeeping::append: token_index ",
                 token_indices[t], " at position ", t, " is negative");
  }
  check_log_beta(log_beta, n_kv_head, "append");

  // Slots are int32: refuse (before changing anything) growth that would overflow them.
  int64_t new_blocks = 0;
  for (int h = 0; h < n_kv_head; ++h) {
    const int64_t len = static_cast<int64_t>(stream(il, h).entries.size()) + stream(il, h).start;
    new_blocks += (len + static_cast<int64_t>(n) + bs - 1) / bs - (len + bs - 1) / bs;
  }
  int64_t capacity = m_pool.capacity();
  while (capacity - m_pool.n_used() < new_blocks) capacity = std::max<int64_t>(1, 2 * capacity);
  TRIMKV_CHECK(capacity * bs <= std::numeric_limits<int32_t>::max(), Input,
               "KvBookkeeping::append: the KV pool cannot grow to ", capacity, " blocks of ", bs,
               " entries (slot ids are int32)");

  std::vector<int32_t> slots(n * static_cast<size_t>(n_kv_head));  // [n, n_kv_head]
  for (int h = 0; h < n_kv_head; ++h) {
    Stream& s = m_streams[static_cast<size_t>(il * n_kv_head + h)];
    for (size_t t = 0; t < n; ++t) {
      const int32_t p = s.start + static_cast<int32_t>(s.entries.size());  // row past the last entry
      if (p % bs == 0) {
        TRIMKV_ASSERT(static_cast<int32_t>(s.blocks.size()) == p / bs);
        s.blocks.push_back(m_pool.allocate().block_id);
      }
      const float lb = log_beta.empty() ? 0.0f : log_beta[t * static_cast<size_t>(n_kv_head) + h];
      s.entries.push_back(EntryMeta{token_indices[t], lb, log1p_beta_of(lb)});
      slots[t * static_cast<size_t>(n_kv_head) + h] = s.blocks.back() * bs + p % bs;
    }
  }
  m_total_entries += static_cast<int64_t>(n) * n_kv_head;
  return slots;
}

void KvBookkeeping::set_newest_log_beta(int il, const std::vector<float>& log_beta) {
  const size_t n_kv_head = static_cast<size_t>(m_geometry.n_kv_head);
  TRIMKV_CHECK(il >= 0 && il < m_geometry.n_layer && log_beta.size() % n_kv_head == 0, Input,
               "KvBookkeeping::set_newest_log_beta: layer ", il, ", ", log_beta.size(), " values for ", n_kv_head,
               " KV heads");
  check_log_beta(log_beta, static_cast<int>(n_kv_head), "set_newest_log_beta");
  const size_t n = log_beta.size() / n_kv_head;
  for (size_t h = 0; h < n_kv_head; ++h)
    TRIMKV_CHECK(stream(il, static_cast<int>(h)).entries.size() >= n, Input, "KvBookkeeping::set_newest_log_beta: layer ",
                 il, " head ", h, " holds ", stream(il, static_cast<int>(h)).entries.size(), " entries, fewer than ", n);
  for (size_t h = 0; h < n_kv_head; ++h) {
    std::vector<EntryMeta>& entries = m_streams[static_cast<size_t>(il) * n_kv_head + h].entries;
    const size_t first = entries.size() - n;
    for (size_t t = 0; t < n; ++t) {
      const float lb = log_beta[t * n_kv_head + h];
      entries[first + t].log_beta = lb;
      entries[first + t].log1p_beta = log1p_beta_of(lb);
    }
  }
}

void KvBookkeeping::compact(Stream& s, const std::vector<int32_t>& keep, int32_t bs, Compaction compaction,
                            std::vector<SlotMove>& moves, std::vector<int32_t>& freed) {
  const int32_t len = static_cast<int32_t>(s.entries.size());
  const int32_t n_keep = static_cast<int32_t>(keep.size());
  const int32_t shift = len - n_keep;  // entries dropped
  if (n_keep == 0) {
    freed = s.blocks;
    s.blocks.clear();
    s.entries.clear();
    s.start = 0;
    return;
  }
  // Rows each direction would move: toward the front keep[j] goes to j, toward the end to
  // shift + j.
  int32_t to_front = 0, to_back = 0;
  for (int32_t j = 0; j < n_keep; ++j) {
    to_front += keep[static_cast<size_t>(j)] != j;
    to_back += keep[static_cast<size_t>(j)] != shift + j;
  }
  // Kept entries behind the first n_keep positions, keep[tail..]: as many as the holes in front,
  // the rows filling them from the tail would move.
  const int32_t tail = static_cast<int32_t>(std::lower_bound(keep.begin(), keep.end(), n_keep) - keep.begin());
  const bool fill = compaction == Compaction::kFillFromTail && n_keep - tail < to_front;
  const int32_t front_moves = fill ? n_keep - tail : to_front;
  // Toward the end only when it moves fewer rows and holds no more blocks afterwards.
  const int32_t blocks_front = (s.start + n_keep + bs - 1) / bs;
  const int32_t blocks_back = ((s.start + shift) % bs + n_keep + bs - 1) / bs;
  if (to_back < front_moves && blocks_back <= blocks_front) {
    moves.reserve(static_cast<size_t>(to_back));
    // From the last kept entry down: a move reads keep[j] < every position an earlier move
    // (at j' > j, writing shift + j' > keep[j]) wrote.
    for (int32_t j = n_keep - 1; j >= 0; --j) {
      const int32_t src = keep[static_cast<size_t>(j)], dst = shift + j;
      if (src == dst) continue;
      s.entries[static_cast<size_t>(dst)] = s.entries[static_cast<size_t>(src)];
      moves.push_back(SlotMove{slot_of(s, src, bs), slot_of(s, dst, bs)});
    }
    s.entries.erase(s.entries.begin(), s.entries.begin() + shift);
    const int32_t first = s.start + shift;
    const int32_t n_free = first / bs;  // leading blocks holding no kept row
    freed.assign(s.blocks.begin(), s.blocks.begin() + n_free);
    s.blocks.erase(s.blocks.begin(), s.blocks.begin() + n_free);
    s.start = first % bs;
    return;
  }
  if (fill) {
    moves.reserve(static_cast<size_t>(n_keep - tail));
    // The i-th hole among positions [0, n_keep) takes keep[tail + i] >= n_keep: no move reads a
    // position another one writes.
    int32_t j = 0, filler = tail;
    for (int32_t p = 0; p < n_keep && filler < n_keep; ++p) {
      if (j < tail && keep[static_cast<size_t>(j)] == p) {
        ++j;
        continue;
      }
      const int32_t src = keep[static_cast<size_t>(filler++)];
      s.entries[static_cast<size_t>(p)] = s.entries[static_cast<size_t>(src)];
      moves.push_back(SlotMove{slot_of(s, src, bs), slot_of(s, p, bs)});
    }
  } else {
    moves.reserve(static_cast<size_t>(to_front));
    // Toward the front: entry keep[j] moves to position j <= keep[j]. A move reads position
    // keep[j], which no earlier move (writing positions < j <= keep[j]) has touched.
    for (int32_t j = 0; j < n_keep; ++j) {
      const int32_t src = keep[static_cast<size_t>(j)];
      if (src == j) continue;
      s.entries[static_cast<size_t>(j)] = s.entries[static_cast<size_t>(src)];
      moves.push_back(SlotMove{slot_of(s, src, bs), slot_of(s, j, bs)});
    }
  }
  s.entries.resize(static_cast<size_t>(n_keep));
  const size_t n_blocks_kept = static_cast<size_t>((s.start + n_keep + bs - 1) / bs);
  freed.assign(s.blocks.begin() + static_cast<std::ptrdiff_t>(n_blocks_kept), s.blocks.end());
  s.blocks.resize(n_blocks_kept);
}

ApplyResult KvBookkeeping::apply(const EvictionPlan& plan, const ApplyHooks& hooks, Compaction compaction) {
  plan.validate(*this);
  const int32_t bs = m_geometry.block_size;
  const int64_t n_streams = static_cast<int64_t>(m_streams.size());
  // Heads are independent: compacted across the threads, their moves (unless a hook runs them)
  // and freed blocks gathered in head order afterwards (the pool sees the same releases in the
  // same order as one by one).
  std::vector<std::vector<SlotMove>> moves(static_cast<size_t>(n_streams));
  std::vector<std::vector<int32_t>> freed(static_cast<size_t>(n_streams));
  ApplyResult result;
  for (int64_t si = 0; si < n_streams; ++si)
    result.n_evicted += static_cast<int64_t>(m_streams[static_cast<size_t>(si)].entries.size()) -
                        static_cast<int64_t>(plan.keep(static_cast<int>(si / m_geometry.n_kv_head),
                                                       static_cast<int>(si % m_geometry.n_kv_head))
                                                 .size());
  at::parallel_for(0, n_streams, 8, [&](int64_t s0, int64_t s1) {
    for (int64_t si = s0; si < s1; ++si) {
      if (hooks.before) hooks.before(si);
      std::vector<SlotMove>& m = moves[static_cast<size_t>(si)];
      compact(m_streams[static_cast<size_t>(si)],
              plan.keep(static_cast<int>(si / m_geometry.n_kv_head), static_cast<int>(si % m_geometry.n_kv_head)), bs,
              compaction, m, freed[static_cast<size_t>(si)]);
      if (hooks.run_moves) {
        if (!m.empty()) hooks.run_moves(si, m);
        m = {};
      }
    }
  });
  m_total_entries -= result.n_evicted;
  size_t n_moves = 0;
  for (const auto& m : moves) n_moves += m.size();
  result.moves.reserve(n_moves);
  result.stream_moves.reserve(static_cast<size_t>(n_streams) + 1);
  for (int64_t si = 0; si < n_streams; ++si) {
    result.stream_moves.push_back(result.moves.size());
    const auto& m = moves[static_cast<size_t>(si)];
    result.moves.insert(result.moves.end(), m.begin(), m.end());
    for (int32_t b : freed[static_cast<size_t>(si)]) m_pool.release(b);
    result.n_blocks_freed += static_cast<int32_t>(freed[static_cast<size_t>(si)].size());
  }
  result.stream_moves.push_back(result.moves.size());
  return result;
}

void KvBookkeeping::clear() {
  for (Stream& s : m_streams) {
    s.blocks.clear();
    s.entries.clear();
    s.start = 0;
  }
  m_pool.release_all();
  m_tokens.clear();
  m_total_entries = 0;
}

void KvBookkeeping::check_invariants() const {
  const int32_t bs = m_geometry.block_size;
  const int32_t cap = m_pool.capacity();
  TRIMKV_ASSERT(m_pool.n_free() + m_pool.n_used() == cap, "free ", m_pool.n_free(), " + used ",
                m_pool.n_used(), " != capacity ", cap);
  std::vector<int> owner(static_cast<size_t>(cap), -1);
  int64_t entries = 0;
  int64_t blocks = 0;
  for (size_t si = 0; si < m_streams.size(); ++si) {
    const Stream& s = m_streams[si];
    const int64_t len = static_cast<int64_t>(s.entries.size());
    entries += len;
    TRIMKV_ASSERT(s.start >= 0 && s.start < bs && (len > 0 || s.start == 0), "stream ", si, " starts at row ",
                  s.start, " with ", len, " entries (block size ", bs, ")");
    TRIMKV_ASSERT(static_cast<int64_t>(s.blocks.size()) == (s.start + len + bs - 1) / bs, "stream ", si,
                  " holds ", s.blocks.size(), " blocks for ", len, " entries from row ", s.start);
    for (int32_t b : s.blocks) {
      TRIMKV_ASSERT(b >= 0 && b < cap, "stream ", si, " holds block ", b, " outside the pool");
      TRIMKV_ASSERT(m_pool.is_used(b), "stream ", si, " holds free block ", b);
      TRIMKV_ASSERT(owner[static_cast<size_t>(b)] == -1, "block ", b, " owned by streams ",
                    owner[static_cast<size_t>(b)], " and ", si);
      owner[static_cast<size_t>(b)] = static_cast<int>(si);
      ++blocks;
    }
  }
  TRIMKV_ASSERT(blocks == m_pool.n_used(), blocks, " blocks owned by streams but ", m_pool.n_used(),
                " in use");
  TRIMKV_ASSERT(entries == m_total_entries, "total_entries ", m_total_entries, " != ", entries);
}

}  // namespace trimkv
