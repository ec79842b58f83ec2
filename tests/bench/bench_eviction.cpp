// Eviction benchmark (not a test): decode step time at growing contexts for the full cache and for
// dbtrimkv at a fixed budget, the cost of selection + compaction, KV bytes held vs the budget, and
// the peak cache during a long chunked prefill. Prints Markdown tables (README "Benchmarks").
//
// Model: a random-weight Llama with the SmolVLM-256M text sizes (30 layers, hidden 576, 9 heads,
// 3 KV heads, head_dim 64, MLP 1536, vocab 49152), float32. Gates: a hand-set EntryScorer (log β
// from the post-norm hidden state): timings do not depend on what the scores mean.
// Decode step times are measured on caches filled with random K/V (decode cost depends on the
// cache length, not its content); the prefill peak with real forwards.
// Usage: bench_eviction [threads=2] [budget_per_head=180] [slack=32] [max_context=8192]
//                       [prefill_tokens=8192] [policy=dbtrimkv] [kv_dtype=f32|bf16|f16]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "trimkv/core/evictor.h"
#include "trimkv/core/generation.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/text_family.h"
#include "trimkv/core/text_model.h"

using namespace trimkv;

namespace {

class BenchScorer final : public EntryScorer {
 public:
  at::Tensor log_beta(int64_t il, const at::Tensor& x) const override {
    return (at::softplus(x.narrow(1, 0, 3) * 4.0) * -0.05).contiguous();  // [n, 3], < 0
  }
};

TextModel random_smolvlm_text() {
  TextConfig c;
  c.model_type = "llama";
  c.architecture = "LlamaForCausalLM (bench)";
  c.vocab_size = 49152;
  c.hidden_size = 576;
  c.intermediate_size = 1536;
  c.n_layer = 30;
  c.n_head = 9;
  c.n_kv_head = 3;
  c.head_dim = 64;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 32768;
  c.tie_word_embeddings = true;
  c.rope.theta = 100000.0;
  at::manual_seed(0);
  auto rnd = [](std::vector<int64_t> shape) { return at::randn(shape) * 0.02; };
  const int64_t d = c.hidden_size, q = c.n_head * c.head_dim, kv = c.n_kv_head * c.head_dim;
  DecoderWeights w;
  w.embed = rnd({c.vocab_size, d});
  w.lm_head = w.embed;
  w.final_norm = at::ones({d});
  for (int64_t il = 0; il < c.n_layer; ++il) {
    DecoderLayerWeights l;
    l.attn_norm = at::ones({d});
    l.mlp_norm = at::ones({d});
    l.w_qkv = rnd({q + 2 * kv, d});
    l.w_o = rnd({d, q});
    l.w_gate_up = rnd({2 * c.intermediate_size, d});
    l.w_down = rnd({d, c.intermediate_size});
    w.layers.push_back(std::move(l));
  }
  TextModel m;
  m.dir = "(random SmolVLM-256M-shaped text decoder)";
  m.config = c;
  m.family = &llama_family();
  m.decoder = std::make_shared<TextDecoder>(c, llama_family(), std::move(w));
  return m;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<int32_t> ids(int64_t first, int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(1 + ((first + i) * 7919) % 49000);
  return v;
}

// A cache holding `n` tokens of random K/V (and log β) in every head: decode cost depends on the
// cache's length, not its content, so step times are measured without paying for a prefill.
void fill(KvCache& cache, int64_t n) {
  const KvGeometry& g = cache.geometry();
  std::vector<TokenInfo> infos(static_cast<size_t>(n));
  std::vector<int32_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    infos[i].token_index = static_cast<int32_t>(i);
    infos[i].rope_position = static_cast<int32_t>(i);
    idx[i] = static_cast<int32_t>(i);
  }
  cache.register_tokens(infos);
  for (int il = 0; il < g.n_layer; ++il) {
    const at::Tensor k = at::randn({n, g.n_kv_head, g.head_dim});
    const at::Tensor lb = (at::rand({n, g.n_kv_head}) * -0.5 - 1e-4).contiguous();
    cache.append(il, k, at::randn_like(k), idx,
                 std::vector<float>(lb.data_ptr<float>(), lb.data_ptr<float>() + lb.numel()));
  }
}

struct Point {
  int64_t context = 0;
  double full_mean = 0, full_median = 0;
  double db_mean = 0, db_median = 0;
  double first_evict_ms = 0;  // the first compression, of the whole filled cache
  int64_t first_evict_entries = 0;
  int64_t events = 0;         // steady-state compressions during the timed steps
  double select_ms = 0, apply_ms = 0;
  int64_t entries_at_event = 0;
  double bytes_max_ratio = 0, bytes_mean_ratio = 0, reserved_max_ratio = 0;
};

std::pair<double, double> time_steps(TextRunner& runner, int steps, KvCache& cache,
                                     int64_t budget_bytes, Point* p) {
  std::vector<double> t;
  double bytes_sum = 0, bytes_max = 0, reserved_max = 0;
  int32_t next = 17;
  for (int i = 0; i < steps; ++i) {
    auto s0 = std::chrono::steady_clock::now();
    const at::Tensor logits = runner.step(next);
    t.push_back(ms_since(s0));
    next = static_cast<int32_t>(logits.argmax().item<int64_t>());
    bytes_sum += static_cast<double>(cache.bytes_held());
    bytes_max = std::max(bytes_max, static_cast<double>(cache.bytes_held()));
    reserved_max = std::max(reserved_max, static_cast<double>(cache.bytes_reserved()));
  }
  if (p && budget_bytes > 0) {
    p->bytes_max_ratio = bytes_max / static_cast<double>(budget_bytes);
    p->bytes_mean_ratio = bytes_sum / steps / static_cast<double>(budget_bytes);
    p->reserved_max_ratio = reserved_max / static_cast<double>(budget_bytes);
  }
  double sum = 0;
  for (double x : t) sum += x;
  std::sort(t.begin(), t.end());
  return {sum / static_cast<double>(t.size()), t[t.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int64_t budget = argc > 2 ? std::atoll(argv[2]) : 180;
  const int64_t slack = argc > 3 ? std::atoll(argv[3]) : 32;
  const int64_t max_context = argc > 4 ? std::atoll(argv[4]) : 8192;
  const int64_t prefill_tokens = argc > 5 ? std::atoll(argv[5]) : 8192;
  const std::string policy = argc > 6 ? argv[6] : "dbtrimkv";
  const std::string kv_dtype = argc > 7 ? argv[7] : "f32";
  const at::ScalarType kv_type = kv_dtype == "f16" ? at::kHalf : kv_dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  const at::TensorOptions kv_options = at::TensorOptions().dtype(kv_type);
  const int full_steps = 16, db_steps = 96, chunk = 256;
  at::set_num_threads(threads);
  at::manual_seed(1);
  const TextModel m = random_smolvlm_text();
  const KvGeometry g = kv_geometry_of(m.config, 16);
  const int64_t budget_global = budget * g.n_streams();
  const int64_t bytes_per_entry = 2 * g.head_dim * static_cast<int64_t>(c10::elementSize(kv_type));
  const int64_t budget_bytes = budget_global * bytes_per_entry;
  BenchScorer scorer;
  EvictionSettings s;
  s.policy = policy;
  s.budget_per_head = budget;
  s.slack = slack;
  if (policy == "dbtrimkv") s.options = {"lookahead=2"};

  std::printf("threads %d; policy %s, KV %s; budget %lld per head = %lld entries (%.2f MiB), slack %lld per "
              "head; block size %d; %d (full) / %d (budgeted) timed decode steps per context\n\n",
              threads, policy.c_str(), kv_dtype.c_str(), static_cast<long long>(budget), static_cast<long long>(budget_global),
              budget_bytes / 1048576.0, static_cast<long long>(slack), g.block_size, full_steps,
              db_steps);
  std::printf("| context | full: step ms (mean / median) | full: KV MiB | dbtrimkv: step ms (mean / "
              "median) | dbtrimkv: KV held max / mean vs budget | first compression: ms (entries) | "
              "compressions in %d steps | select + compact ms (entries) | per compression, %% of a "
              "step | amortised, %% of a step |\n",
              db_steps);
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  std::vector<Point> points;
  for (int64_t n = 1024; n <= max_context; n *= 2) {
    Point p;
    p.context = n;
    {
      KvCache cache(g, kv_options);
      fill(cache, n);
      TextRunner runner(m, cache, chunk);
      runner.set_eviction(nullptr, &scorer);
      runner.step(1);  // warm-up
      std::tie(p.full_mean, p.full_median) = time_steps(runner, full_steps, cache, 0, nullptr);
    }
    {
      KvCache cache(g, kv_options);
      fill(cache, n);
      TextRunner runner(m, cache, chunk);
      Evictor ev(s, g);
      runner.set_eviction(&ev, &scorer);
      runner.step(1);  // the first step compresses the filled cache down to the budget
      if (ev.n_events() > 0) {
        const EvictionEvent& e = ev.trace().events.front();
        p.first_evict_ms = e.select_ms + e.apply_ms;
        p.first_evict_entries = e.entries_before;
      }
      const int64_t events0 = ev.n_events();
      std::tie(p.db_mean, p.db_median) = time_steps(runner, db_steps, cache, budget_bytes, &p);
      for (int64_t i = events0; i < ev.n_events(); ++i) {
        const EvictionEvent& e = ev.trace().events[static_cast<size_t>(i)];
        p.select_ms += e.select_ms;
        p.apply_ms += e.apply_ms;
        p.entries_at_event += e.entries_before;
        ++p.events;
      }
      if (p.events) {
        p.select_ms /= static_cast<double>(p.events);
        p.apply_ms /= static_cast<double>(p.events);
        p.entries_at_event /= p.events;
      }
    }
    const double per = 100.0 * (p.select_ms + p.apply_ms) / p.db_median;
    std::printf("| %lld | %.1f / %.1f | %.1f | %.1f / %.1f | %.2f / %.2f | %.1f (%lld) | %lld | %.2f "
                "+ %.2f (%lld) | %.1f%% | %.2f%% |\n",
                static_cast<long long>(n), p.full_mean, p.full_median,
                n * g.n_streams() * bytes_per_entry / 1048576.0, p.db_mean, p.db_median,
                p.bytes_max_ratio, p.bytes_mean_ratio, p.first_evict_ms,
                static_cast<long long>(p.first_evict_entries), static_cast<long long>(p.events),
                p.select_ms, p.apply_ms, static_cast<long long>(p.entries_at_event), per,
                per * static_cast<double>(p.events) / db_steps);
    std::fflush(stdout);
    points.push_back(p);
  }
  double lo = 1e30, hi = 0;
  for (const Point& p : points) {
    lo = std::min(lo, p.db_median);
    hi = std::max(hi, p.db_median);
  }
  std::printf("\ndbtrimkv median step time over the contexts: max/min - 1 = %.1f%%; blocks in use "
              "at most %.2fx the budget\n\n",
              100.0 * (hi / lo - 1.0), points.back().reserved_max_ratio);
  std::fflush(stdout);

  // Peak during a long chunked prefill (real forwards).
  if (prefill_tokens > 0) {
    KvCache cache(g, kv_options);
    TextRunner runner(m, cache, chunk);
    Evictor ev(s, g);
    runner.set_eviction(&ev, &scorer);
    auto t0 = std::chrono::steady_clock::now();
    runner.prefill(ids(0, prefill_tokens));
    const double sec = ms_since(t0) / 1000.0;
    const int64_t block_bytes = static_cast<int64_t>(g.block_size) * bytes_per_entry;
    std::printf("| prefill of %lld tokens, chunk %d | peak KV entries | peak KV MiB (blocks in use) "
                "| compressions | prefill s |\n|---|---|---|---|---|\n",
                static_cast<long long>(prefill_tokens), chunk);
    std::printf("| full cache (by construction) | %lld | %.1f | 0 | - |\n",
                static_cast<long long>(prefill_tokens * g.n_streams()),
                prefill_tokens * g.n_streams() * bytes_per_entry / 1048576.0);
    std::printf("| dbtrimkv, budget %lld (+ one chunk = %lld) | %lld | %.1f | %lld | %.1f |\n",
                static_cast<long long>(budget_global),
                static_cast<long long>(budget_global + chunk * g.n_streams()),
                static_cast<long long>(ev.peak_entries()),
                cache.peak_blocks_used() * block_bytes / 1048576.0,
                static_cast<long long>(ev.n_events()), sec);
  }
  return 0;
}
