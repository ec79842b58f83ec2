// KV-cache bookkeeping without tensors (STYLE.md §4): the block pool, per (layer, KV head) stream
// a block table, per-entry metadata in cache order, and the sequence's token stream. KvCache puts
// tensor storage behind it; everything here is unit-tested on its own.
//
// Layout: stream (il, h) holds length(il, h) entries from row r = first_row(il, h) of its first
// block on (0 <= r < block_size; 0 for an empty stream): entry e lives in slot
//   block_table(il, h)[(r + e) / block_size] * block_size + (r + e) % block_size
// of the shared pool. Each stream owns exactly ceil((r + length) / block_size) blocks, and every
// used block belongs to exactly one stream. r > 0 only after a compaction toward the end (apply).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "trimkv/core/block_pool.h"
#include "trimkv/core/eviction_plan.h"
#include "trimkv/core/kv_types.h"

namespace trimkv {

// One row copy for compaction: the storage must copy slot src_slot to dst_slot.
struct SlotMove {
  int32_t src_slot = 0;
  int32_t dst_slot = 0;
};

struct ApplyResult {
  // Within a stream, in the order given, no move reads a slot an earlier move wrote, so executing
  // them one by one in place is safe (so is gather-then-scatter). A stream compacted toward its
  // front has dst_slot <= src_slot in ascending slot order (so has one whose holes were filled
  // from its tail, Compaction::kFillFromTail); one compacted toward its end (apply) has
  // dst_slot >= src_slot in descending order.
  std::vector<SlotMove> moves;
  // moves[stream_moves[s], stream_moves[s + 1]) are stream s's (il * n_kv_head + h); streams
  // touch disjoint slots, so their moves may run concurrently.
  std::vector<size_t> stream_moves;
  int64_t n_evicted = 0;       // entries dropped
  int32_t n_blocks_freed = 0;  // tail blocks returned to the pool
};

// How apply() may rearrange a head's kept entries.
enum class Compaction {
  // Kept entry keep[j] becomes entry j: the cache stays in the order entries were appended.
  kPreserveOrder,
  // The kept set is the same, but a hole among the first n_keep entries may be filled by a kept
  // entry from behind them (in ascending order: the i-th hole takes the i-th such entry), which
  // moves only as many rows as there are holes. For policies whose scores and state never depend
  // on where an entry sits (PolicyNeeds::order_free); when keeping the order moves fewer rows
  // (evicting the oldest entries), the order is kept.
  kFillFromTail,
};

// Per-stream work that apply() runs on the worker thread compacting stream s (il * n_kv_head + h),
// so that a compression touches each head once: streams run concurrently, each exactly once.
struct ApplyHooks {
  // Before stream s changes: its entries are still the ones the plan indexes.
  std::function<void(int64_t s)> before;
  // Stream s's moves, in an order that is safe to run in place (ApplyResult::moves). When set,
  // the moves go here instead of into ApplyResult::moves (which then stays empty).
  std::function<void(int64_t s, const std::vector<SlotMove>& moves)> run_moves;
};

class KvBookkeeping {
 public:
  // initial_blocks pre-sizes the pool (it grows on demand regardless).
  explicit KvBookkeeping(const KvGeometry& geometry, int32_t initial_blocks = 0);

  const KvGeometry& geometry() const { return m_geometry; }

  // --- token stream -------------------------------------------------------------------------
  // Records tokens of the sequence; tokens[0].token_index must equal n_tokens() and the indices
  // must be consecutive.
  void register_tokens(const std::vector<TokenInfo>& tokens);
  int32_t n_tokens() const { return static_cast<int32_t>(m_tokens.size()); }
  const TokenInfo& token(int32_t token_index) const;  // checked
  const std::vector<TokenInfo>& tokens() const { return m_tokens; }

  // --- mutation -----------------------------------------------------------------------------
  // Appends n = token_indices.size() entries to every KV head of layer il. log_beta is
  // [n, n_kv_head] row-major (value of token t, head h at t * n_kv_head + h) or empty (all 0:
  // never forget); values must be <= 0 and not NaN. Returns the slot of each new entry in the
  // same [n, n_kv_head] layout. Allocates blocks as needed (the pool may grow).
  std::vector<int32_t> append(int il, const std::vector<int32_t>& token_indices,
                              const std::vector<float>& log_beta = {});
  // Gives the newest n entries of every KV head of layer il the log β [n, n_kv_head] (layout and
  // rules of append's), n = log_beta.size() / n_kv_head: for a forward whose log β is computed on
  // a device and read back once after the layers (forward_cached on a GPU). Error{Input} when a
  // head holds fewer than n entries or a value is not <= 0; nothing changes then.
  void set_newest_log_beta(int il, const std::vector<float>& log_beta);
  // Keeps exactly the entries the plan lists, in the listed order (kept entry keep[j] becomes
  // entry j; with Compaction::kFillFromTail the set is kept but maybe not the order), and
  // returns the blocks no longer used to the pool. Each head is compacted toward
  // the front of its rows (the tail blocks are freed) or, when that moves fewer rows and holds no
  // more blocks, toward the end (the head's first row moves on and the leading blocks are
  // freed), so evicting the oldest entries moves no row at all. The plan is validated first
  // (nothing changes on error); then each stream runs hooks.before, is compacted, and hands its
  // moves to hooks.run_moves.
  ApplyResult apply(const EvictionPlan& plan, const ApplyHooks& hooks = {},
                    Compaction compaction = Compaction::kPreserveOrder);
  // Drops every entry and token and returns every block to the pool (capacity is kept).
  void clear();

  // --- queries ------------------------------------------------------------------------------
  int32_t length(int il, int h) const { return static_cast<int32_t>(stream(il, h).entries.size()); }
  const std::vector<EntryMeta>& entries(int il, int h) const { return stream(il, h).entries; }
  const std::vector<int32_t>& block_table(int il, int h) const { return stream(il, h).blocks; }
  int32_t first_row(int il, int h) const { return stream(il, h).start; }  // r in the layout above
  int32_t slot(int il, int h, int32_t entry) const;  // checked
  int64_t total_entries() const { return m_total_entries; }
  int32_t n_blocks_used() const { return m_pool.n_used(); }
  const BlockPool& pool() const { return m_pool; }

  // Verifies every invariant (see the header comment); throws ErrorKind::Internal naming the
  // first violation. O(capacity + entries): for tests and debug builds.
  void check_invariants() const;

 private:
  struct Stream {
    std::vector<int32_t> blocks;     // [ceil((start + len) / block_size)] block ids
    std::vector<EntryMeta> entries;  // [len] in cache order
    int32_t start = 0;               // row of entry 0 in blocks[0]
  };
  Stream& stream(int il, int h);
  const Stream& stream(int il, int h) const;
  static int32_t slot_of(const Stream& s, int32_t entry, int32_t block_size);
  // apply() for one head: its moves and the blocks it no longer uses (not yet released).
  static void compact(Stream& s, const std::vector<int32_t>& keep, int32_t block_size, Compaction compaction,
                      std::vector<SlotMove>& moves, std::vector<int32_t>& freed);

  KvGeometry m_geometry;
  BlockPool m_pool;
  std::vector<Stream> m_streams;    // [n_layer * n_kv_head], index il * n_kv_head + h
  std::vector<TokenInfo> m_tokens;  // [n_tokens], token_index -> info
  int64_t m_total_entries = 0;
};

}  // namespace trimkv
