// Soak (issue 21; README "Reliability"): long runs of one chat session, as the Studio and `trimkv
// chat` hold it, with the figures the README quotes. Not a test (minutes, machine-dependent);
// exits 1 when a figure misses its bound.
//
// Part 1, long session: N generated tokens (default 20,000) over turns of one conversation under
// dbtrimkv at a fixed budget (M entries per layer and KV head, slack S). Reported per 2,000
// tokens: RSS, the most KV entries held after any forward vs the budget, the median decode step.
// Bounds: RSS after N within 5% of RSS after 2,000; KV entries <= 1.05 x budget at every step
// (with slack S the cache peaks at budget + S per head + one token: pick S accordingly); median
// step time flat (last window within 15% of the first).
// Part 2, position limit: the full cache driven to the model's max_position_embeddings: the answer
// stops with stop_reason "context_full", the next turn is refused with a message naming the limit,
// and the conversation is still usable: reset() and a new turn under a budget answers.
//
// The model is the embedded demo model by default (any checkpoint folder works), copied to a
// scratch folder whose config.json gets max_position_embeddings = N + 4,096 for part 1 (its own
// limit is 16,384: the session's positions keep growing under eviction, and what is measured here
// is memory and time, not answer quality) and 1,024 for part 2 (to reach the limit in seconds).
//
// Usage: soak_chat [tokens=20000] [budget_per_head=256] [slack=8] [model=demo] [threads=0]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trimkv/core/cpu_tuning.h"
#include "trimkv/core/default_model.h"
#include "trimkv/core/error.h"
#include "trimkv/core/eviction_settings.h"
#include "trimkv/vision/chat_engine.h"

namespace fs = std::filesystem;
using trimkv::vision::ChatEngine;

namespace {

double rss_mib() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      double kib = 0;
      in >> kib;
      return kib / 1024.0;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return -1;
}

// A copy of `model` whose text decoder allows `positions` positions.
fs::path model_with_positions(const fs::path& model, const fs::path& scratch, int64_t positions) {
  const fs::path out = scratch / ("model-" + std::to_string(positions));
  fs::create_directories(out);
  for (const auto& e : fs::directory_iterator(model))
    if (e.is_regular_file()) fs::copy_file(e.path(), out / e.path().filename(), fs::copy_options::overwrite_existing);
  std::ifstream in(out / "config.json");
  nlohmann::json c = nlohmann::json::parse(in);
  in.close();
  if (c.contains("text_config")) c["text_config"]["max_position_embeddings"] = positions;
  c["max_position_embeddings"] = positions;
  std::ofstream(out / "config.json") << c.dump(1);
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

struct Window {
  int64_t tokens = 0;         // generated so far, at the window's end
  double rss = 0;             // MiB at the window's end
  int64_t peak_entries = 0;   // most KV entries after any forward, over the window
  std::vector<double> steps;  // ms per decode step, one value per turn
};

int long_session(const fs::path& model, int64_t n_tokens, int64_t budget, int64_t slack) {
  trimkv::EngineOptions options;
  auto engine = ChatEngine::load(model.string(), options);
  trimkv::EvictionSettings ev;
  ev.policy = "dbtrimkv";
  ev.budget_per_head = budget;
  ev.slack = slack;
  engine->set_eviction(ev);
  // Answers of 200 tokens (EOS ignored): each turn gives its decode time, the most KV entries
  // held after any forward so far, and RSS afterwards; windows of 2,000 tokens aggregate them.
  const int64_t kTurn = 200, kWindow = 2000;
  std::vector<Window> windows(1);
  int64_t generated = 0, budget_global = 0, events = 0;
  int turn = 0;
  while (generated < n_tokens) {
    engine->add_user_turn("Tell me more about the shapes, part " + std::to_string(++turn) + ".", {});
    trimkv::GenerationParams p;
    p.max_new_tokens = static_cast<int>(std::min(kTurn, n_tokens - generated));
    p.stop_at_eos = false;
    const trimkv::GenerationResult r = engine->respond(p);
    if (r.stop_reason != "max_tokens") {
      std::printf("stopped early: %s after %lld tokens\n", r.stop_reason.c_str(), static_cast<long long>(generated));
      return 1;
    }
    const int64_t n = static_cast<int64_t>(r.tokens.size());
    generated += n;
    budget_global = r.budget_global;
    events = r.eviction_events;
    Window& w = windows.back();
    // decode_ms covers the n - 1 steps after the first token (sampled from the prefill's logits).
    if (n > 1) w.steps.push_back(r.decode_ms / static_cast<double>(n - 1));
    w.peak_entries = std::max(w.peak_entries, r.peak_kv_entries);
    w.tokens = generated;
    w.rss = rss_mib();
    if (generated % kWindow == 0 && generated < n_tokens) windows.emplace_back();
  }
  std::printf("## Long session: %lld tokens, %d turns, dbtrimkv, budget %lld per head (%lld entries), slack %lld, %lld "
              "compressions\n\n",
              static_cast<long long>(generated), turn, static_cast<long long>(budget), static_cast<long long>(budget_global),
              static_cast<long long>(slack), static_cast<long long>(events));
  std::printf("| tokens generated | RSS MiB | KV entries, most after a forward | / budget | median step ms |\n");
  std::printf("|---:|---:|---:|---:|---:|\n");
  double worst_kv = 0;
  for (const Window& w : windows) {
    const double ratio = static_cast<double>(w.peak_entries) / static_cast<double>(budget_global);
    worst_kv = std::max(worst_kv, ratio);
    std::printf("| %lld | %.1f | %lld | %.3f | %.3f |\n", static_cast<long long>(w.tokens), w.rss,
                static_cast<long long>(w.peak_entries), ratio, median(w.steps));
  }
  const double rss_growth = windows.back().rss / windows.front().rss - 1.0;
  const double step_drift = median(windows.back().steps) / median(windows.front().steps) - 1.0;
  const bool ok_rss = rss_growth <= 0.05, ok_kv = worst_kv <= 1.05, ok_step = step_drift <= 0.15;
  std::printf("\nRSS after %lld vs after %lld tokens: %+.2f%% (bound +5%%): %s\n", static_cast<long long>(windows.back().tokens),
              static_cast<long long>(windows.front().tokens), 100 * rss_growth, ok_rss ? "ok" : "MISSED");
  std::printf("KV entries at most %.3f x the budget (bound 1.05): %s\n", worst_kv, ok_kv ? "ok" : "MISSED");
  std::printf("median step, last window vs first: %+.1f%% (bound +15%%): %s\n\n", 100 * step_drift,
              ok_step ? "ok" : "MISSED");
  return ok_rss && ok_kv && ok_step ? 0 : 1;
}

int position_limit(const fs::path& model) {
  auto engine = ChatEngine::load(model.string(), {});
  const int64_t limit = engine->state().max_tokens;
  engine->add_user_turn("Tell me everything about the shapes.", {});
  trimkv::GenerationParams p;
  p.max_new_tokens = static_cast<int>(2 * limit);
  p.stop_at_eos = false;
  const trimkv::GenerationResult r = engine->respond(p);
  const auto st = engine->state();
  std::printf("## Position limit (%lld positions, full cache)\n\n", static_cast<long long>(limit));
  std::printf("answer: %zu tokens, stop_reason %s, conversation at %lld of %lld positions, %lld KV entries\n",
              r.tokens.size(), r.stop_reason.c_str(), static_cast<long long>(st.tokens),
              static_cast<long long>(st.max_tokens), static_cast<long long>(st.kv_entries));
  bool ok = r.stop_reason == "context_full" && st.tokens == limit;
  std::string refused;
  try {
    engine->add_user_turn("And now?", {});
  } catch (const trimkv::Error& e) {
    refused = e.what();
  }
  std::printf("next turn: %s\n", refused.empty() ? "ACCEPTED (should be refused)" : ("refused: " + refused).c_str());
  ok = ok && !refused.empty();
  // Still usable: a new conversation under a budget answers.
  engine->reset();
  trimkv::EvictionSettings ev;
  ev.policy = "dbtrimkv";
  ev.budget_per_head = 32;
  engine->set_eviction(ev);
  engine->add_user_turn("What shapes are there?", {});
  trimkv::GenerationParams q;
  q.max_new_tokens = 64;
  const trimkv::GenerationResult again = engine->respond(q);
  std::printf("after reset, under dbtrimkv at 32 per head: %zu tokens, stop_reason %s\n\n", again.tokens.size(),
              again.stop_reason.c_str());
  ok = ok && !again.tokens.empty() && again.stop_reason != "context_full";
  std::printf("position limit: %s\n\n", ok ? "ok" : "MISSED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n_tokens = argc > 1 ? std::atoll(argv[1]) : 20000;
  const int64_t budget = argc > 2 ? std::atoll(argv[2]) : 256;
  const int64_t slack = argc > 3 ? std::atoll(argv[3]) : 8;
  const std::string model_arg = argc > 4 ? argv[4] : "demo";
  const int threads = argc > 5 ? std::atoi(argv[5]) : 0;
  if (n_tokens < 4000 || budget <= 0 || slack < 0 || threads < 0) {
    std::fprintf(stderr, "usage: soak_chat [tokens>=4000] [budget_per_head>0] [slack>=0] [model=demo] [threads>=0]\n");
    return 2;
  }
  try {
    if (threads > 0) trimkv::set_compute_threads(threads);
    const fs::path model = model_arg == "demo" ? fs::path(trimkv::default_model_dir()) : fs::path(model_arg);
    const fs::path scratch = fs::temp_directory_path() / ("trimkv-soak-" + std::to_string(::getpid()));
    fs::create_directories(scratch);
    const int a = long_session(model_with_positions(model, scratch, n_tokens + 4096), n_tokens, budget, slack);
    const int b = position_limit(model_with_positions(model, scratch, 1024));
    fs::remove_all(scratch);
    return a || b;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "soak_chat: %s\n", e.what());
    return 2;
  }
}
