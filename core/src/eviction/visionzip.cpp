// visionzip (Yang et al. 2024): before the decoder, keep the dominant image tokens by
// vision-tower attention and merge the rest into a few contextual tokens. This changes the token
// stream (the decoder never sees the merged tokens), so it is not a cache plan: the policy's plan
// keeps everything, and visionzip_select() is what the vision pipeline calls on each image's
// tokens (Session passes it to the TurnEncoder as an ImageTokenReducer; Idefics3 calls it per
// tile after the connector); the Session records the result as token-merge events of the trace.
#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>

#include "trimkv/core/error.h"
#include "trimkv/core/policies.h"

namespace trimkv {

VisionZipResult visionzip_select(const at::Tensor& attention_in, const at::Tensor& keys_in,
                                 const at::Tensor& embeddings, int n_dominant, int n_contextual) {
  TRIMKV_CHECK(attention_in.dim() == 1, Shape, "visionzip: attention must be [n], got ",
               attention_in.sizes());
  const int64_t n = attention_in.size(0);
  TRIMKV_CHECK(keys_in.dim() == 2 && keys_in.size(0) == n, Shape, "visionzip: keys must be [", n,
               ", dk], got ", keys_in.sizes());
  TRIMKV_CHECK(embeddings.dim() == 2 && embeddings.size(0) == n, Shape,
               "visionzip: embeddings must be [", n, ", d], got ", embeddings.sizes());
  TRIMKV_CHECK(n_dominant >= 0 && n_contextual >= 0, Input,
               "visionzip: dominant and contextual counts must be >= 0");
  // A host algorithm: inputs from a tower on the GPU come to the CPU.
  const at::Tensor attention = attention_in.to(at::kCPU, at::kFloat).contiguous();
  const float* a = attention.data_ptr<float>();

  VisionZipResult r;
  r.assignment.assign(static_cast<size_t>(n), -1);
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return a[x] > a[y]; });
  const int64_t k = std::min<int64_t>(n_dominant, n);
  r.dominant.assign(order.begin(), order.begin() + k);
  std::sort(r.dominant.begin(), r.dominant.end());
  std::vector<uint8_t> is_dominant(static_cast<size_t>(n), 0);
  for (int32_t t : r.dominant) is_dominant[static_cast<size_t>(t)] = 1;
  std::vector<int32_t> rest;
  for (int32_t t = 0; t < n; ++t)
    if (!is_dominant[static_cast<size_t>(t)]) rest.push_back(t);
  const int64_t n_ctx = std::min<int64_t>(n_contextual, static_cast<int64_t>(rest.size()));
  if (n_ctx > 0) {
    // Seeds: every step-th remaining token (step = n_rest / n_ctx), the first n_ctx of them.
    const int64_t step = std::max<int64_t>(1, static_cast<int64_t>(rest.size()) / n_ctx);
    std::vector<int32_t> seed_of_rest(rest.size(), -1);
    for (int64_t c = 0; c < n_ctx; ++c) {
      r.contextual_seed.push_back(rest[static_cast<size_t>(c * step)]);
      seed_of_rest[static_cast<size_t>(c * step)] = static_cast<int32_t>(c);
    }
    const at::Tensor keys = keys_in.to(at::kCPU, at::kFloat);
    const at::Tensor kn = keys / keys.norm(2, {1}, true).clamp_min(1e-12);
    const at::Tensor seeds = kn.index_select(
        0, at::tensor(std::vector<int64_t>(r.contextual_seed.begin(), r.contextual_seed.end()),
                      at::kLong));
    const at::Tensor sim = at::matmul(kn, seeds.t()).contiguous();  // [n, n_ctx]
    const float* ps = sim.data_ptr<float>();
    for (size_t i = 0; i < rest.size(); ++i) {
      const int32_t t = rest[i];
      int32_t c = seed_of_rest[i];
      if (c < 0) {  // most similar seed; ties: the first
        c = 0;
        for (int64_t j = 1; j < n_ctx; ++j)
          if (ps[t * n_ctx + j] > ps[t * n_ctx + c]) c = static_cast<int32_t>(j);
      }
      r.assignment[static_cast<size_t>(t)] = c;
    }
  }
  r.embeddings = visionzip_reduce_rows(r, embeddings);
  return r;
}

at::Tensor visionzip_reduce_rows(const VisionZipResult& r, const at::Tensor& x) {
  std::vector<at::Tensor> rows;
  if (!r.dominant.empty())
    rows.push_back(x.index_select(
        0, at::tensor(std::vector<int64_t>(r.dominant.begin(), r.dominant.end()), at::kLong).to(x.device())));
  std::vector<std::vector<int64_t>> members(r.contextual_seed.size());
  for (size_t t = 0; t < r.assignment.size(); ++t)
    if (r.assignment[t] >= 0) members[static_cast<size_t>(r.assignment[t])].push_back(static_cast<int64_t>(t));
  for (const auto& m : members) rows.push_back(x.index_select(0, at::tensor(m, at::kLong).to(x.device())).mean(0, true));
  return rows.empty() ? x.narrow(0, 0, 0) : at::cat(rows, 0);
}

namespace {

class VisionZipPolicy final : public EvictionPolicy {
 public:
  VisionZipPolicy(int dominant, int contextual) : m_dominant(dominant), m_contextual(contextual) {}
  std::string name() const override { return "visionzip"; }
  PolicyNeeds needs() const override {
    PolicyNeeds n;
    n.uses_budget = false;
    return n;
  }
  EvictionPlan plan(const PolicyContext& ctx) override { return EvictionPlan::keep_all(*ctx.kv); }
  int dominant() const { return m_dominant; }
  int contextual() const { return m_contextual; }

 private:
  int m_dominant, m_contextual;
};

std::unique_ptr<EvictionPolicy> make(const OptionReader& o, const Budget&, const KvGeometry&) {
  return std::make_unique<VisionZipPolicy>(static_cast<int>(o.get_int("dominant")),
                                           static_cast<int>(o.get_int("contextual")));
}

}  // namespace

bool visionzip_settings(const EvictionPolicy& policy, int& dominant, int& contextual) {
  const auto* v = dynamic_cast<const VisionZipPolicy*>(&policy);
  if (!v) return false;
  dominant = v->dominant();
  contextual = v->contextual();
  return true;
}

const PolicyEntry& visionzip_policy_entry() {
  static const PolicyEntry kEntry{
      {"visionzip",
       "before the decoder: keep the dominant image tokens by vision-tower attention, merge the "
       "rest into a few contextual tokens (changes the token stream; budget ignored)",
       {int_option("dominant", "54", 0, 1 << 20,
                   "dominant image tokens kept per image (per tile of a tiled image)"),
        int_option("contextual", "10", 0, 1 << 20,
                   "contextual (merged) tokens per image (per tile of a tiled image)")},
       false,
       false},
      make};
  return kEntry;
}

}  // namespace trimkv
