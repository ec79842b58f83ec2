// fastv (Chen et al. 2024): after layer K, the R% image tokens that the last query attends to
// least are dropped from every later layer. The budget is ignored (token pruning).
//
// Note "fastv on the cache": the reference removes those tokens' hidden rows after layer K, so
// layers > K never compute them. Here the decoder runs unchanged and the plan removes their
// entries from layers > K right after the forward that prefilled the image; later tokens never
// see them, but the rows after them in that same forward did. The attention used is that of the
// forward's last query row at layer K (the last prompt token with --whole-prompt-eviction or when
// the prompt fits in one chunk), summed over the query heads.
#include <ATen/ATen.h>

#include <algorithm>

#include "trimkv/core/cache_attention.h"
#include "trimkv/core/error.h"
#include "trimkv/core/policies.h"

namespace trimkv {

namespace {

class FastVPolicy final : public EvictionPolicy {
 public:
  FastVPolicy(int layer, double ratio) : m_layer(layer), m_ratio(ratio) {}
  std::string name() const override { return "fastv"; }
  PolicyNeeds needs() const override {
    PolicyNeeds n;
    n.query_rows = true;
    n.uses_budget = false;
    return n;
  }
  void observe_layer(const LayerObservation& obs) override {
    if (obs.il != m_layer) return;
    const at::Tensor& q = *obs.q;
    const at::Tensor last = q.narrow(0, q.size(0) - 1, 1);
    // One query row, bottom-right aligned: it sees every entry of the layer.
    TRIMKV_ASSERT(obs.cache != nullptr);
    const at::Tensor sums = attend_cache_layer(*obs.cache, obs.il, last, obs.scale, true).attn_sum.contiguous();
    m_attention.assign(static_cast<size_t>(obs.view.n_kv_head), {});
    for (int h = 0; h < obs.view.n_kv_head; ++h) {
      const float* row = sums.data_ptr<float>() + h * sums.size(1);
      m_attention[static_cast<size_t>(h)].assign(row, row + obs.view.lengths[h]);
    }
  }
  bool wants_to_plan(const PolicyContext& ctx) const override {
    const auto& tokens = ctx.kv->tokens();
    for (; m_scanned < static_cast<int64_t>(tokens.size()); ++m_scanned)
      if (tokens[static_cast<size_t>(m_scanned)].modality == Modality::Image)
        return !m_attention.empty();
    return false;
  }
  EvictionPlan plan(const PolicyContext& ctx) override {
    const KvBookkeeping& kv = *ctx.kv;
    const KvGeometry& g = kv.geometry();
    EvictionPlan plan = EvictionPlan::keep_all(kv);
    // Image tokens of this forward (not yet pruned) and the attention the last query gave them.
    std::vector<std::pair<float, int32_t>> images;  // (attention, token_index)
    std::vector<float> per_token(static_cast<size_t>(kv.n_tokens()), 0.0f);
    std::vector<uint8_t> present(static_cast<size_t>(kv.n_tokens()), 0);
    for (int h = 0; h < g.n_kv_head; ++h) {
      const auto& entries = kv.entries(m_layer, h);
      const auto& att = m_attention[static_cast<size_t>(h)];
      TRIMKV_ASSERT(att.size() == entries.size(), "fastv: observation of layer ", m_layer,
                    " is stale (", att.size(), " vs ", entries.size(), " entries)");
      for (size_t e = 0; e < entries.size(); ++e) {
        const int32_t t = entries[e].token_index;
        if (t < m_processed || kv.token(t).modality != Modality::Image) continue;
        per_token[static_cast<size_t>(t)] += att[e];
        present[static_cast<size_t>(t)] = 1;
      }
    }
    for (int32_t t = 0; t < kv.n_tokens(); ++t)
      if (present[static_cast<size_t>(t)])
        images.emplace_back(per_token[static_cast<size_t>(t)], t);
    m_processed = kv.n_tokens();
    m_scanned = m_processed;
    m_attention.clear();
    const size_t n_drop = static_cast<size_t>(m_ratio * static_cast<double>(images.size()));
    if (n_drop == 0) return plan;
    // Lowest attention first; ties: the older token goes first (newer wins).
    std::sort(images.begin(), images.end());
    std::vector<uint8_t> drop(static_cast<size_t>(kv.n_tokens()), 0);
    for (size_t i = 0; i < n_drop; ++i) drop[static_cast<size_t>(images[i].second)] = 1;
    for (int il = m_layer + 1; il < g.n_layer; ++il)
      for (int h = 0; h < g.n_kv_head; ++h) {
        const auto& entries = kv.entries(il, h);
        auto& keep = plan.keep(il, h);
        keep.clear();
        for (size_t e = 0; e < entries.size(); ++e)
          if (!drop[static_cast<size_t>(entries[e].token_index)])
            keep.push_back(static_cast<int32_t>(e));
      }
    return plan;
  }

 private:
  int m_layer;
  double m_ratio;
  int32_t m_processed = 0;                      // tokens before this were already considered
  mutable int64_t m_scanned = 0;                // wants_to_plan's scan cursor (>= m_processed)
  std::vector<std::vector<float>> m_attention;  // [n_kv_head] -> [length] at layer m_layer
};

std::unique_ptr<EvictionPolicy> make(const OptionReader& o, const Budget& b, const KvGeometry& g) {
  const int64_t layer = o.get_int("layer");
  TRIMKV_CHECK(layer + 1 < g.n_layer, Input, "policy fastv: layer ", layer,
               " leaves no later layer to prune (the model has ", g.n_layer, " layers)");
  return std::make_unique<FastVPolicy>(static_cast<int>(layer), o.get_double("ratio"));
}

}  // namespace

const PolicyEntry& fastv_policy_entry() {
  static const PolicyEntry kEntry{
      {"fastv",
       "after layer K, drop the R% least-attended image tokens from all later layers",
       {int_option("layer", "2", 0, 1 << 16, "K: the layer whose attention ranks image tokens"),
        double_option("ratio", "0.5", 0.0, 1.0, "R: fraction of image tokens dropped")},
       false,
       false},
      make};
  return kEntry;
}

}  // namespace trimkv
