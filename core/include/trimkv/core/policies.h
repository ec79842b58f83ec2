// The individual policies (one file each in core/src/eviction/) as registry entries, and the
// pieces several of them share. Internal to core: app/ uses eviction_settings.h and engine.h.
#pragma once
#include <memory>

#include "trimkv/core/eviction_policy.h"

namespace trimkv {

// A registered policy: its declarative info and its factory. The factory receives an
// OptionReader built (and validated) from info, checks budget/geometry constraints and returns
// the policy.
struct PolicyEntry {
  PolicyInfo info;
  std::unique_ptr<EvictionPolicy> (*make)(const OptionReader& options, const Budget& budget,
                                          const KvGeometry& g);
};

const PolicyEntry& full_policy_entry();
const PolicyEntry& dbtrimkv_policy_entry();
const PolicyEntry& trimkv_policy_entry();
const PolicyEntry& snapkv_policy_entry();
const PolicyEntry& adakv_policy_entry();
const PolicyEntry& pyramidkv_policy_entry();
const PolicyEntry& rkv_policy_entry();
const PolicyEntry& h2o_policy_entry();
const PolicyEntry& streamingllm_policy_entry();
const PolicyEntry& fastv_policy_entry();
const PolicyEntry& visionzip_policy_entry();
const PolicyEntry& random_policy_entry();

// Declaration helpers for PolicyInfo tables.
inline PolicyOptionInfo int_option(std::string name, std::string def, double min, double max,
                                   std::string help) {
  PolicyOptionInfo o;
  o.name = std::move(name);
  o.kind = PolicyOptionInfo::Kind::Int;
  o.default_value = std::move(def);
  o.min = min;
  o.max = max;
  o.help = std::move(help);
  return o;
}
inline PolicyOptionInfo double_option(std::string name, std::string def, double min, double max,
                                      std::string help) {
  PolicyOptionInfo o = int_option(std::move(name), std::move(def), min, max, std::move(help));
  o.kind = PolicyOptionInfo::Kind::Double;
  return o;
}
inline PolicyOptionInfo choice_option(std::string name, std::string def,
                                      std::vector<std::string> choices, std::string help) {
  PolicyOptionInfo o;
  o.name = std::move(name);
  o.kind = PolicyOptionInfo::Kind::Choice;
  o.default_value = std::move(def);
  o.choices = std::move(choices);
  o.help = std::move(help);
  return o;
}
inline constexpr double kMaxOption = 1e9;

// Error{Input} "policy X needs a budget" when the budget is unlimited; returns M_global.
int64_t require_budget(const Budget& budget, const KvGeometry& g, const std::string& policy);

// --- shared pieces of the SnapKV family (snapkv, adakv, pyramidkv)
// --------------------------------

// Per layer, the rotated queries of the last `window` tokens of the stream, kept across forwards
// (a ring of the newest rows). Fed by observe_layer, read at planning time.
class QueryWindow {
 public:
  explicit QueryWindow(int window = 0) : m_window(window) {}
  void push(int il, const at::Tensor& q /* [n_q, n_head, head_dim] */);
  // [min(window, seen), n_head, head_dim] or undefined when nothing was seen.
  const at::Tensor& rows(int il) const;
  void on_applied() {}  // queries do not move with eviction
  int window() const { return m_window; }

 private:
  int m_window;
  std::vector<at::Tensor> m_rows;  // [n_layer] -> [<= window, n_head, head_dim]
};

// SnapKV votes: per KV head of layer il, the attention the window queries give each entry (summed
// over the window rows and averaged over the query heads of the group), then 1-D pooled along the
// cache order with `kernel` (odd; "avg" or "max", same-size output). Requires that the last
// rows.size(0) entries of every head are the window's own tokens, in order (true while the
// policy keeps its window). Returns [n_kv_head] -> [length(il, h)] scores.
std::vector<std::vector<float>> snapkv_layer_scores(const KvCache& cache, int il,
                                                    const at::Tensor& window_q, int kernel,
                                                    const std::string& pooling);

// Base of the SnapKV family: collects the window of recent queries and scores entries with
// snapkv_layer_scores; each member only decides how the budget is split (plan()).
class SnapKvFamilyPolicy : public EvictionPolicy {
 public:
  SnapKvFamilyPolicy(int window, int kernel, std::string pooling);
  PolicyNeeds needs() const override;
  void observe_layer(const LayerObservation& obs) override;
  StreamScores entry_scores(const PolicyContext& ctx) const override;

 protected:
  int window() const { return m_queries.window(); }

 private:
  QueryWindow m_queries;
  int m_kernel;
  std::string m_pooling;
};

// The options snapkv, adakv and pyramidkv share (window, kernel, pooling).
std::vector<PolicyOptionInfo> snapkv_family_options();

// PyramidKV's per-head budget of each layer (entries, window included); sums to n_layer · m.
std::vector<int64_t> pyramidkv_layer_budgets(int n_layer, int64_t m, int64_t window, double beta);

// Scores the policy family uses for its window: +inf on the last `window` tokens of the stream.
void protect_window(const KvBookkeeping& kv, int window, StreamScores& scores);

// The learned policies' scores (trimkv, dbtrimkv): retention_scores with lookahead n, then +inf
// on the newest `window` tokens and on the first `sinks` tokens of the stream (0 = none).
StreamScores learned_retention_scores(const KvBookkeeping& kv, int lookahead, int64_t window,
                                      int64_t sinks);

// --- VisionZip token selection (before the decoder; changes the token stream) -------------------

struct VisionZipResult {
  std::vector<int32_t> dominant;         // indices of the kept image tokens, ascending
  std::vector<int32_t> assignment;       // [n_tokens]: contextual token a non-dominant token was
                                         // merged into (-1 for dominant tokens)
  std::vector<int32_t> contextual_seed;  // token index that seeded each contextual token
  at::Tensor embeddings;                 // [n_dominant + n_contextual, d]: dominant rows in
                                         // ascending order, then the merged contextual rows
};

// VisionZip (Yang et al. 2024): keep the `n_dominant` tokens that receive the most vision-tower
// attention (ties: lower index first), then merge the rest into `n_contextual` tokens: seeds are
// every (n_rest / n_contextual)-th remaining token, every other remaining token joins the seed
// whose key it is most cosine-similar to, and each contextual token is the mean of its members'
// embeddings. attention: [n] received attention per token; keys: [n, dk] (similarity space);
// embeddings: [n, d] (what the decoder receives).
VisionZipResult visionzip_select(const at::Tensor& attention, const at::Tensor& keys,
                                 const at::Tensor& embeddings, int n_dominant, int n_contextual);

// The same reduction applied to other rows of the tokens ([n, d] -> [n_dominant + n_contextual,
// d]: the dominant rows, then each contextual token's members' mean), e.g. Qwen3-VL's deepstack
// features, which must follow the embeddings they belong to.
at::Tensor visionzip_reduce_rows(const VisionZipResult& r, const at::Tensor& x);

// The visionzip policy's token counts (for the vision pipeline); false for any other policy.
bool visionzip_settings(const EvictionPolicy& policy, int& dominant, int& contextual);

}  // namespace trimkv
