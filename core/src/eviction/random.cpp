// random: the floor baseline. Each (layer, KV head) keeps M entries chosen uniformly at random,
// seeded and deterministic (the k-th plan of a run uses seed + k).
#include <random>

#include "trimkv/core/policies.h"

namespace trimkv {

namespace {

class RandomPolicy final : public EvictionPolicy {
 public:
  explicit RandomPolicy(uint64_t seed) : m_seed(seed) {}
  std::string name() const override { return "random"; }
  EvictionPlan plan(const PolicyContext& ctx) override {
    const KvGeometry& g = ctx.kv->geometry();
    std::mt19937_64 rng(m_seed + m_n_plans++);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    StreamScores s(static_cast<size_t>(g.n_streams()));
    for (int il = 0; il < g.n_layer; ++il)
      for (int h = 0; h < g.n_kv_head; ++h) {
        auto& out = s[static_cast<size_t>(il * g.n_kv_head + h)];
        out.resize(static_cast<size_t>(ctx.kv->length(il, h)));
        for (float& x : out) x = u(rng);
      }
    return select_per_head_top_k(
        *ctx.kv, s, std::vector<int64_t>(static_cast<size_t>(g.n_streams()), ctx.budget_per_head));
  }

 private:
  uint64_t m_seed;
  uint64_t m_n_plans = 0;
};

std::unique_ptr<EvictionPolicy> make(const OptionReader& o, const Budget& b, const KvGeometry& g) {
  require_budget(b, g, "random");
  b.require_per_head_at_least(g, 1, "policy random");
  return std::make_unique<RandomPolicy>(static_cast<uint64_t>(o.get_int("seed")));
}

}  // namespace

const PolicyEntry& random_policy_entry() {
  static const PolicyEntry kEntry{
      {"random",
       "uniformly random M entries per head (seeded; the floor baseline)",
       {int_option("seed", "0", 0, 9.0e15, "random seed")},
       false,
       true},
      make};
  return kEntry;
}

}  // namespace trimkv
