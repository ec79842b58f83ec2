// Gate training (METHOD.md §3): the loss against a direct Python implementation, its gradient by
// finite differences, the trainer (only gates change, the loss and S^g drop, resume is exact)
// and the dataset's handling of bad lines; data-parallel training against one process. Oracle: tests/oracle/gate_fixtures.py.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <random>
#include <thread>

#include "data_parallel_skip.h"
#include "small_gate_run.h"
#include "test_util.h"
#include "trimkv/core/data_parallel.h"
#include "trimkv/core/error.h"
#include "trimkv/core/gate_file.h"
#include "trimkv/core/gate_training.h"
#include "trimkv/core/tensor_buffer_cache.h"
#include "trimkv/core/text_model.h"
#include "trimkv/core/weight_store.h"

using namespace trimkv;

namespace {

std::string gates_fixture(const std::string& name) { return test::data_dir() + "/gates/" + name; }

at::Tensor ids_tensor(const std::vector<int32_t>& ids) {
  return at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong);
}

// The oracle sequence: ids, targets (next token), mask of label positions.
struct OracleSeq {
  std::vector<int32_t> ids;
  at::Tensor targets, mask;
};

OracleSeq oracle_seq(const nlohmann::json& j) {
  OracleSeq s;
  s.ids = j["ids"].get<std::vector<int32_t>>();
  const int64_t n = static_cast<int64_t>(s.ids.size());
  std::vector<int64_t> tgt(n, 0);
  for (int64_t t = 0; t + 1 < n; ++t) tgt[t] = s.ids[t + 1];
  s.targets = at::tensor(tgt, at::kLong);
  s.mask = at::zeros({n}, at::kBool);
  for (int64_t p : j["label_positions"].get<std::vector<int64_t>>()) s.mask[p] = true;
  return s;
}

// A float64 copy of a decoder (finite differences need the precision).
std::shared_ptr<TextDecoder> to_double(const TextModel& m) {
  DecoderWeights w = m.decoder->weights();
  auto cvt = [](at::Tensor& t) {
    if (t.defined()) t = t.to(at::kDouble).contiguous();
  };
  cvt(w.embed), cvt(w.final_norm);
  w.lm_head = m.decoder->weights().lm_head.is_same(m.decoder->weights().embed) ? w.embed
                                                                                : w.lm_head.to(at::kDouble);
  for (auto& l : w.layers)
    for (at::Tensor* t : {&l.attn_norm, &l.w_qkv, &l.b_qkv, &l.w_o, &l.b_o, &l.q_norm, &l.k_norm,
                          &l.mlp_norm, &l.w_gate_up, &l.w_down})
      cvt(*t);
  return std::make_shared<TextDecoder>(m.config, *m.family, std::move(w));
}

// Central differences of f at a few coordinates of `p`, compared with p.grad().
void check_gradient(at::Tensor p, const std::function<double()>& f, const std::string& name) {
  CAPTURE(name);
  at::Tensor g = p.grad().clone();
  REQUIRE(g.defined());
  const int64_t n = p.numel();
  std::mt19937 rng(11);
  at::Tensor flat = p.detach().view({-1});
  for (int k = 0; k < 4; ++k) {
    const int64_t i = static_cast<int64_t>(rng() % static_cast<uint32_t>(n));
    const double h = 1e-6, orig = flat[i].item<double>();
    flat[i] = orig + h;
    const double up = f();
    flat[i] = orig - h;
    const double down = f();
    flat[i] = orig;
    const double fd = (up - down) / (2 * h), an = g.view({-1})[i].item<double>();
    CAPTURE(i, fd, an);
    REQUIRE(an == Approx(fd).epsilon(1e-5).margin(1e-9));
  }
}

std::string write_synthetic_data(const test::ScratchDir& dir, int n_lines, int len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string text;
  for (int i = 0; i < n_lines; ++i) {
    nlohmann::json ids = nlohmann::json::array();
    for (int t = 0; t < len; ++t) ids.push_back(3 + static_cast<int>(rng() % 300));
    text += nlohmann::json{{"ids", ids}}.dump() + "\n";
  }
  const std::string path = dir.file("data.jsonl");
  test::write_text(path, text);
  return path;
}

TrainOptions small_run(const test::ScratchDir& dir, const std::string& data) {
  TrainOptions o = test::small_gate_run(dir.file("gates.safetensors"), 64);
  o.model_dir = test::model_dir("llama_gqa");
  o.data_path = data;
  return o;
}

}  // namespace

TEST_CASE("Gate loss terms match the direct Python implementation of METHOD.md", "[training][oracle]") {
  TextModel m = load_text_model(test::model_dir("llama_gqa"));
  auto j = test::read_json(gates_fixture("expected.json"));
  WeightStore expected = WeightStore::open_file(gates_fixture("expected.safetensors"));
  OracleSeq s = oracle_seq(j);
  at::Tensor x = m.decoder->embed(ids_tensor(s.ids));
  for (const std::string kind : {"dbtrimkv", "trimkv"}) {
    CAPTURE(kind);
    RetentionGates g = load_gates(gates_fixture("llama_gqa_" + kind + ".safetensors"));
    const auto& c = j["cases"][kind];
    for (double M : j["budgets"].get<std::vector<double>>()) {
      CAPTURE(M);
      const std::string key = std::to_string(M).substr(0, std::to_string(M).find('.') + 2);  // "5.0"
      GateLossOptions o;
      o.budget = M;
      o.capacity = default_capacity_mode(parse_gate_kind(kind));
      GateLoss L = gate_loss(*m.decoder, g, x, s.targets, s.mask, o);
      REQUIRE(L.nll.item<double>() == Approx(c["nll"].get<double>()).epsilon(1e-5));
      REQUIRE(L.kl.item<double>() == Approx(c["kl"].get<double>()).epsilon(1e-4).margin(1e-6));
      REQUIRE(L.total.item<double>() == Approx(c["total"][key].get<double>()).epsilon(1e-5));
      REQUIRE(capacity_loss(L.capacity, M, CapacityMode::PerHead).item<double>() ==
              Approx(c["cap_per_head"][key].get<double>()).epsilon(1e-5).margin(1e-9));
      REQUIRE(capacity_loss(L.capacity, M, CapacityMode::Global).item<double>() ==
              Approx(c["cap_global"][key].get<double>()).epsilon(1e-5).margin(1e-9));
      at::Tensor S = expected.load({kind + ".capacity"}, {});
      REQUIRE((L.capacity - S).abs().max().item<double>() < 1e-4);
    }
  }
}

TEST_CASE("L_cap is 0, with zero gradient, when the budget exceeds every length", "[training]") {
  const int64_t L = 3, H = 2, n = 20;
  std::vector<at::Tensor> lbs;
  for (int64_t l = 0; l < L; ++l) lbs.push_back((-at::rand({n, H}, at::kDouble)).requires_grad_());
  at::Tensor S = retention_capacity(lbs);
  REQUIRE(S.max().item<double>() <= n);  // S_t <= t + 1
  for (CapacityMode mode : {CapacityMode::PerHead, CapacityMode::Global}) {
    at::Tensor cap = capacity_loss(S, static_cast<double>(n), mode);
    REQUIRE(cap.item<double>() == 0.0);
    cap.backward({}, /*retain_graph=*/true);
    for (auto& lb : lbs) {
      REQUIRE(lb.grad().abs().max().item<double>() == 0.0);
      lb.mutable_grad().zero_();
    }
  }
  // And a budget below the lengths is penalised.
  REQUIRE(capacity_loss(S.detach(), 2.0, CapacityMode::PerHead).item<double>() > 0);
  REQUIRE(capacity_loss(S.detach(), 2.0, CapacityMode::Global).item<double>() > 0);
}

TEST_CASE("Gradient of L_cap (per-head and global) matches finite differences", "[training][gradcheck]") {
  for (CapacityMode mode : {CapacityMode::PerHead, CapacityMode::Global}) {
    CAPTURE(capacity_mode_name(mode));
    at::manual_seed(5);
    std::vector<at::Tensor> lbs;
    for (int l = 0; l < 2; ++l) lbs.push_back((-at::rand({12, 3}, at::kDouble) * 0.5).requires_grad_());
    auto f = [&] {
      at::NoGradGuard ng;
      return capacity_loss(retention_capacity(lbs), 3.0, mode).item<double>();
    };
    at::Tensor loss = capacity_loss(retention_capacity(lbs), 3.0, mode);
    REQUIRE(loss.item<double>() > 0);
    loss.backward();
    for (size_t l = 0; l < lbs.size(); ++l) check_gradient(lbs[l], f, "log_beta." + std::to_string(l));
  }
}

TEST_CASE("Gradient of the gated-attention loss w.r.t. every gate tensor matches finite differences (float64)",
          "[training][gradcheck]") {
  TextModel m = load_text_model(test::model_dir("llama_gqa"));
  auto dec = to_double(m);
  auto j = test::read_json(gates_fixture("expected.json"));
  OracleSeq s = oracle_seq(j);
  at::Tensor x = dec->embed(ids_tensor(s.ids));
  for (const std::string kind : {"dbtrimkv", "trimkv"}) {
    CAPTURE(kind);
    RetentionGates g = load_gates(gates_fixture("llama_gqa_" + kind + ".safetensors")).to(at::kDouble);
    g.set_requires_grad(true);
    GateLossOptions o;
    o.budget = 5;
    o.capacity = default_capacity_mode(g.config().kind);
    auto f = [&] {
      at::NoGradGuard ng;
      return gate_loss(*dec, g, x, s.targets, s.mask, o).total.item<double>();
    };
    GateLoss L = gate_loss(*dec, g, x, s.targets, s.mask, o);
    REQUIRE(L.cap.item<double>() > 0);  // every term of the loss is exercised
    L.total.backward();
    for (const auto& p : g.parameters()) check_gradient(p.tensor, f, p.name);
  }
}

TEST_CASE("Training changes only the gates: base weights are bit-identical afterwards", "[training]") {
  test::ScratchDir dir("train-only-gates");
  TextModel m = load_text_model(test::model_dir("llama_gqa"));
  std::vector<at::Tensor> before;
  const auto& w = m.decoder->weights();
  for (const auto& t : {w.embed, w.final_norm, w.lm_head}) before.push_back(t.clone());
  for (const auto& l : w.layers)
    for (const auto& t : {l.attn_norm, l.w_qkv, l.w_o, l.mlp_norm, l.w_gate_up, l.w_down}) before.push_back(t.clone());
  TrainOptions o = small_run(dir, write_synthetic_data(dir, 4, 24, 1));
  DatasetOptions dopt;
  Dataset data = load_dataset(o.data_path, m, dopt);
  GateTrainer trainer(m, data, o);
  RetentionGates init = trainer.gates().clone();
  trainer.run();
  size_t k = 0;
  for (const auto& t : {w.embed, w.final_norm, w.lm_head}) REQUIRE(at::equal(t, before[k++]));
  for (const auto& l : w.layers)
    for (const auto& t : {l.attn_norm, l.w_qkv, l.w_o, l.mlp_norm, l.w_gate_up, l.w_down}) {
      REQUIRE_FALSE(t.requires_grad());
      REQUIRE(at::equal(t, before[k++]));
    }
  // ... while every gate tensor moved.
  auto a = init.parameters(), b = trainer.gates().parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].name);
    REQUIRE_FALSE(at::equal(a[i].tensor, b[i].tensor));
  }
}

TEST_CASE("A short run on a synthetic task lowers the loss and brings S^g under the budget", "[training]") {
  test::ScratchDir dir("train-converges");
  TrainOptions o = small_run(dir, write_synthetic_data(dir, 8, 32, 2));
  // 120 steps: after 80 the ratio was 1.002 with OpenBLAS's Haswell kernels (under 1 with SkylakeX's); after
  // 120 it is 0.72 (Haswell), 0.51 (SandyBridge, Nehalem) and 0.44 (SkylakeX): the kernels' rounding moves
  // this short high-rate run by that much.
  const int64_t steps = 120;
  const size_t last = static_cast<size_t>(steps), tail = last - 5;  // the last five steps
  o.steps = steps;
  o.lr = 0.2;
  o.min_lr = 0.02;
  o.warmup = 2;
  o.lambda = 5.0;     // random tokens: the KL term resists forgetting; weight the budget more
  o.bias_init = 3.0;  // β = σ(3): S^g starts at ~4x the budget (from 18 it takes thousands of steps)
  std::vector<TrainProgress> log;
  TrainResult r = train_gates(o, {}, {}, [&](const TrainProgress& p) { log.push_back(p); });
  REQUIRE(r.steps_done == steps);
  REQUIRE_FALSE(r.interrupted);
  REQUIRE(log.front().capacity_ratio > 2.0);
  auto mean = [&](size_t b, size_t e, double TrainProgress::*f) {
    double s = 0;
    for (size_t i = b; i < e; ++i) s += log[i].*f;
    return s / static_cast<double>(e - b);
  };
  CAPTURE(mean(0, 5, &TrainProgress::loss), mean(tail, last, &TrainProgress::loss), mean(0, 5, &TrainProgress::cap),
          mean(tail, last, &TrainProgress::cap), mean(tail, last, &TrainProgress::capacity_ratio));
  // The capacity term is what a random-token task can lower (its NLL is ~log V whatever the gates do).
  REQUIRE(mean(tail, last, &TrainProgress::loss) < mean(0, 5, &TrainProgress::loss) - 0.5 * mean(0, 5, &TrainProgress::cap));
  REQUIRE(mean(tail, last, &TrainProgress::capacity_ratio) < 1.0);  // S^g below M·L·H at the last position
  // The written file loads, fits the model and records the training budget.
  RetentionGates g = load_gates(o.out_path);
  REQUIRE(g.config().train_budget == 4);
  REQUIRE(gates_file_metadata(o.out_path).at("trained_steps") == std::to_string(steps));
}

TEST_CASE("Resume from a checkpoint continues bit for bit like the uninterrupted run", "[training]") {
  test::ScratchDir dir("train-resume");
  const std::string data = write_synthetic_data(dir, 5, 20, 3);
  TrainOptions o = small_run(dir, data);
  o.batch = 2;  // the data cursor crosses an epoch boundary
  TextModel m = load_text_model(o.model_dir);
  Dataset ds = load_dataset(data, m, {});

  o.out_path = dir.file("a.safetensors");
  GateTrainer a(m, ds, o);
  TrainResult ra = a.run();

  o.out_path = dir.file("b.safetensors");
  std::atomic<bool> stop{false};
  GateTrainer b1(m, ds, o);
  TrainResult rb1 = b1.run([&](const TrainProgress& p) { stop = p.step == 3; }, &stop);
  REQUIRE(rb1.interrupted);
  REQUIRE(rb1.steps_done == 3);
  REQUIRE(rb1.out_path.empty());
  o.resume = true;
  GateTrainer b2(m, ds, o);
  TrainResult rb2 = b2.run();
  REQUIRE(rb2.steps_done == 6);
  REQUIRE(rb2.losses.size() == 3);
  for (size_t i = 0; i < 3; ++i) REQUIRE(rb2.losses[i] == ra.losses[3 + i]);  // exact
  auto pa = a.gates().named_tensors(), pb = b2.gates().named_tensors();
  for (size_t i = 0; i < pa.size(); ++i) REQUIRE(at::equal(pa[i].tensor, pb[i].tensor));
  REQUIRE(test::read_bytes(dir.file("a.safetensors")).size() > 0);
  RetentionGates fa = load_gates(dir.file("a.safetensors")), fb = load_gates(dir.file("b.safetensors"));
  for (size_t i = 0; i < pa.size(); ++i) REQUIRE(at::equal(fa.named_tensors()[i].tensor, fb.named_tensors()[i].tensor));
}

TEST_CASE("--resume from a checkpoint of another configuration is refused, naming the differences", "[training]") {
  test::ScratchDir dir("train-resume-other");
  TrainOptions o = small_run(dir, write_synthetic_data(dir, 3, 16, 4));
  o.steps = 2;
  TextModel m = load_text_model(o.model_dir);
  Dataset ds = load_dataset(o.data_path, m, {});
  GateTrainer(m, ds, o).run();
  o.resume = true;
  o.lr = 0.01;
  o.budget = 8;
  try {
    GateTrainer(m, ds, o).run();
    FAIL("no error");
  } catch (const Error& e) {
    REQUIRE(e.kind() == ErrorKind::Input);
    const std::string msg = e.what();
    REQUIRE_THAT(msg, Catch::Contains("another configuration"));
    REQUIRE_THAT(msg, Catch::Contains("lr: checkpoint 0.05, now 0.01"));
    REQUIRE_THAT(msg, Catch::Contains("budget: checkpoint 4"));
  }
  o.checkpoint_path = dir.file("missing.ckpt");
  REQUIRE_THROWS_WITH(GateTrainer(m, ds, o).run(), Catch::Contains("no checkpoint at"));
}

TEST_CASE("Learning rate: linear warm-up to the peak, cosine down to the floor", "[training]") {
  test::ScratchDir dir("train-lr");
  TrainOptions o = small_run(dir, write_synthetic_data(dir, 2, 8, 5));
  o.steps = 100, o.warmup = 10, o.lr = 1e-3, o.min_lr = 1e-5;
  TextModel m = load_text_model(o.model_dir);
  Dataset ds = load_dataset(o.data_path, m, {});
  GateTrainer t(m, ds, o);
  REQUIRE(t.lr_at(1) == Approx(1e-4));
  REQUIRE(t.lr_at(10) == Approx(1e-3));
  REQUIRE(t.lr_at(55) == Approx(1e-5 + (1e-3 - 1e-5) * 0.5));
  REQUIRE(t.lr_at(100) == Approx(1e-5));
  for (int64_t s = 11; s <= 100; ++s) REQUIRE(t.lr_at(s) <= t.lr_at(s - 1));
}

TEST_CASE("Dataset: bad lines become warnings naming the line, long ones are truncated from the left",
          "[training][data]") {
  TextModel m = load_text_model(test::model_dir("llama_gqa"));
  test::ScratchDir dir("dataset");
  test::write_text(dir.file("img.png"), "not really a png");
  std::string long_text(400, 'a');
  test::write_text(dir.file("d.jsonl"),
                   "{\"text\": \"hello world\"}\n"                                                 // 1 ok
                   "this is not json\n"                                                            // 2
                   "{\"turns\": [{\"text\": \"q\", \"answer\": \"\"}]}\n"                          // 3 empty answer
                   "{\"images\": [\"missing.png\"], \"turns\": [{\"text\": \"q\", \"answer\": \"a\"}]}\n"  // 4
                   "{\"images\": [\"img.png\"], \"turns\": [{\"text\": \"q\", \"answer\": \"a\"}]}\n"      // 5 no vision
                   "\n"                                                                             // 6 blank
                   "{\"turns\": [{\"text\": \"what?\", \"answer\": \"this\"}, {\"text\": \"and?\", \"answer\": \"that\"}]}\n"  // 7 ok
                   "{\"text\": \"" + long_text + "\"}\n"                                            // 8 truncated
                   "{\"ids\": [1, 2, 99999]}\n"                                                     // 9 out of vocab
                   "{\"foo\": 1}\n");                                                               // 10
  DatasetOptions o;
  o.max_len = 16;
  Dataset ds = load_dataset(dir.file("d.jsonl"), m, o);
  REQUIRE(ds.n_lines == 10);
  REQUIRE(ds.samples.size() == 3);
  REQUIRE(ds.samples[0].line == 1);
  REQUIRE(ds.samples[1].line == 7);
  REQUIRE(ds.samples[2].line == 8);
  REQUIRE(ds.samples[2].truncated);
  REQUIRE(ds.samples[2].ids.size() == 16);
  std::string all;
  for (const auto& w : ds.warnings) all += w + "\n";
  CAPTURE(all);
  REQUIRE(ds.warnings.size() == 7);
  REQUIRE_THAT(all, Catch::Contains("line 2: not JSON"));
  REQUIRE_THAT(all, Catch::Contains("line 3: turn 1 has an empty answer; skipped"));
  REQUIRE_THAT(all, Catch::Contains("line 4: image 'missing.png' not found"));
  REQUIRE_THAT(all, Catch::Contains("line 5: has 1 image(s), but model"));
  REQUIRE_THAT(all, Catch::Contains("no vision tower"));
  REQUIRE_THAT(all, Catch::Contains("line 8: "));
  REQUIRE_THAT(all, Catch::Contains("truncated from the left"));
  REQUIRE_THAT(all, Catch::Contains("line 9: token id 99999 is outside the vocabulary"));
  REQUIRE_THAT(all, Catch::Contains("line 10: has neither"));
  // Conversation labels: answers (and the EOS after each) only.
  const TrainingSample& conv = ds.samples[1];
  const auto q1 = m.tokenizer->encode("what?\n", true), a1 = m.tokenizer->encode("this", false);
  for (size_t t = 0; t < q1.size(); ++t) REQUIRE(conv.is_label[t] == 0);
  for (size_t t = 0; t < a1.size(); ++t) REQUIRE(conv.is_label[q1.size() + t] == 1);
  REQUIRE(conv.ids[q1.size() + a1.size()] == m.config.eos_token_ids.front());
  REQUIRE(conv.is_label[q1.size() + a1.size()] == 1);
  REQUIRE(conv.is_label[q1.size() + a1.size() + 1] == 0);  // the second question
  // Nothing usable at all is an error naming the file.
  test::write_text(dir.file("bad.jsonl"), "nope\n");
  REQUIRE_THROWS_WITH(load_dataset(dir.file("bad.jsonl"), m, o), Catch::Contains("has no usable line"));
}

TEST_CASE("The tensor buffer cache reuses freed buffers and changes no number", "[training][buffers]") {
  at::Tensor outlives;
  {
    const TensorBufferCache cache;
    REQUIRE(cache.active());
    const TensorBufferCacheStats before = TensorBufferCache::stats();
    void* first = nullptr;
    {
      at::Tensor a = at::empty({1 << 20}, at::kFloat);  // 4 MiB
      first = a.data_ptr();
    }
    at::Tensor b = at::empty({1 << 20}, at::kFloat);
    CHECK(b.data_ptr() == first);  // the same pages again, not a fresh mapping
    CHECK(TensorBufferCache::stats().hits == before.hits + 1);
    CHECK(reinterpret_cast<uintptr_t>(b.data_ptr()) % 64 == 0);
    at::Tensor small = at::empty({16}, at::kFloat);  // below the threshold: LibTorch's own
    CHECK(TensorBufferCache::stats().misses == before.misses + 1);
    outlives = at::ones({1 << 20}, at::kFloat);  // made inside, freed after the cache is gone
    const TensorBufferCache nested;               // an enclosing cache stays the one at work
    CHECK_FALSE(nested.active());
  }
  CHECK(TensorBufferCache::stats().cached == 0);
  CHECK(outlives.sum().item<double>() == double{1 << 20});
  outlives = at::Tensor();

  // A training step's loss and gate gradients are bit-identical with and without it.
  TextModel m = load_text_model(test::model_dir("llama_gqa"));
  auto j = test::read_json(gates_fixture("expected.json"));
  OracleSeq s = oracle_seq(j);
  at::Tensor x = m.decoder->embed(ids_tensor(s.ids));
  auto step = [&] {
    RetentionGates g = load_gates(gates_fixture("llama_gqa_dbtrimkv.safetensors"));
    g.set_requires_grad(true);
    GateLossOptions o;
    o.budget = 5;
    GateLoss L = gate_loss(*m.decoder, g, x, s.targets, s.mask, o);
    L.total.backward();
    std::vector<at::Tensor> out{L.total.detach()};
    for (const auto& p : g.parameters()) out.push_back(p.tensor.grad().clone());
    return out;
  };
  const std::vector<at::Tensor> plain = step();
  std::vector<at::Tensor> cached, again;
  {
    const TensorBufferCache cache(0, 1024);  // the fixture's tensors are small: cache from 1 KiB
    const int64_t hits = TensorBufferCache::stats().hits;
    cached = step();
    again = step();  // largely on the buffers the first step freed
    CHECK(TensorBufferCache::stats().hits > hits + 100);
  }
  REQUIRE(plain.size() == cached.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    CHECK(at::equal(plain[i], cached[i]));
    CHECK(at::equal(plain[i], again[i]));
  }
}

// ---------------------------------------------------------------------------------------------
// Data parallel (data_parallel.h): ranks as threads of this process, each with its own group.

namespace {

struct RankRun {
  TrainResult result;
  std::vector<at::Tensor> gates;
};

// Trains `o` as `ranks` data-parallel ranks (threads; one process when ranks == 1). stop_at > 0:
// rank 0 alone asks to stop after that step (the ranks agree on it).
std::vector<RankRun> run_ranks(const TextModel& m, const Dataset& ds, TrainOptions o, int ranks, int64_t stop_at = 0) {
  std::vector<RankRun> out(ranks);
  if (ranks == 1) {
    std::atomic<bool> stop{false};
    GateTrainer t(m, ds, o);
    out[0].result = t.run([&](const TrainProgress& p) { stop = p.step == stop_at; }, &stop);
    for (const auto& p : t.gates().named_tensors()) out[0].gates.push_back(p.tensor.detach().clone());
    return out;
  }
  o.parallel.world_size = ranks;
  o.parallel.master_port = free_local_port();
  o.parallel.timeout_s = 60;
  std::vector<std::string> errors(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        TrainOptions ro = o;
        ro.parallel.rank = r;
        DataParallelGroup group(ro.parallel);
        std::atomic<bool> stop{false};
        GateTrainer t(m, ds, ro, nullptr, &group);
        out[r].result = t.run([&](const TrainProgress& p) { stop = r == 0 && p.step == stop_at; }, &stop);
        for (const auto& p : t.gates().named_tensors()) out[r].gates.push_back(p.tensor.detach().clone());
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) {
    CAPTURE(r);
    REQUIRE(errors[r].empty());
  }
  return out;
}

double max_gate_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  return d;
}

}  // namespace

TEST_CASE("Data parallel: 2 and 3 ranks give the gates of one process with the same global batch",
          "[training][parallel]") {
  SKIP_WITHOUT_GLOO();
  test::ScratchDir dir("train-dp");
  const std::string data = write_synthetic_data(dir, 7, 20, 5);
  TrainOptions o = small_run(dir, data);
  o.batch = 3;  // 3 over 2 ranks: uneven shares; the cursor crosses epochs
  TextModel m = load_text_model(o.model_dir);
  Dataset ds = load_dataset(data, m, {});
  o.out_path = dir.file("one.safetensors");
  const auto one = run_ranks(m, ds, o, 1);
  for (int ranks : {2, 3}) {
    CAPTURE(ranks);
    o.out_path = dir.file("dp" + std::to_string(ranks) + ".safetensors");
    const auto dp = run_ranks(m, ds, o, ranks);
    for (int r = 0; r < ranks; ++r) {
      REQUIRE(dp[r].result.steps_done == o.steps);
      REQUIRE(max_gate_diff(dp[r].gates, one[0].gates) < 1e-5);
      REQUIRE(max_gate_diff(dp[r].gates, dp[0].gates) == 0);  // the ranks hold the same bits
      for (size_t i = 0; i < one[0].result.losses.size(); ++i)
        REQUIRE(dp[r].result.losses[i] == Approx(one[0].result.losses[i]).epsilon(1e-6));
    }
    // Only rank 0 wrote files; its gates file holds what the ranks trained.
    REQUIRE(dp[0].result.out_path == o.out_path);
    REQUIRE(dp[1].result.out_path.empty());
    RetentionGates written = load_gates(o.out_path);
    std::vector<at::Tensor> w;
    for (const auto& p : written.named_tensors()) w.push_back(p.tensor);
    REQUIRE(max_gate_diff(w, dp[0].gates) == 0);
  }
}

TEST_CASE("Data parallel: a checkpoint resumes with another world size", "[training][parallel]") {
  SKIP_WITHOUT_GLOO();
  test::ScratchDir dir("train-dp-resume");
  const std::string data = write_synthetic_data(dir, 5, 20, 6);
  TrainOptions o = small_run(dir, data);
  o.batch = 2;
  TextModel m = load_text_model(o.model_dir);
  Dataset ds = load_dataset(data, m, {});
  o.out_path = dir.file("straight.safetensors");
  const auto straight = run_ranks(m, ds, o, 1);
  for (auto [first, second] : {std::pair{2, 1}, std::pair{1, 2}}) {
    CAPTURE(first, second);
    o.out_path = dir.file("resumed.safetensors");
    o.checkpoint_path = dir.file("resumed-" + std::to_string(first) + ".ckpt");
    o.resume = false;
    const auto part = run_ranks(m, ds, o, first, 3);  // rank 0 asks to stop after step 3
    for (const auto& r : part) {
      REQUIRE(r.result.interrupted);
      REQUIRE(r.result.steps_done == 3);
    }
    o.resume = true;
    const auto rest = run_ranks(m, ds, o, second);
    for (const auto& r : rest) {
      REQUIRE(r.result.steps_done == o.steps);
      REQUIRE(max_gate_diff(r.gates, straight[0].gates) < 1e-5);
      for (size_t i = 0; i < r.result.losses.size(); ++i)
        REQUIRE(r.result.losses[i] == Approx(straight[0].result.losses[3 + i]).epsilon(1e-6));
    }
  }
}

TEST_CASE("Data parallel: bad groups and a rank that never comes are clear errors", "[training][parallel]") {
  DataParallelOptions o;
  o.world_size = 2;
  o.rank = 2;
  REQUIRE_THROWS_WITH(DataParallelGroup(o), Catch::Contains("rank 2 is outside 0..1"));
  o.rank = 0;
  o.world_size = 1;
  REQUIRE_THROWS_WITH(DataParallelGroup(o), Catch::Contains("at least 2 ranks"));
  o.world_size = 2;
  o.master_port = 70000;
  REQUIRE_THROWS_WITH(DataParallelGroup(o), Catch::Contains("master port 70000"));
  SKIP_WITHOUT_GLOO();
  // Rank 0 alone: its peer never arrives; the wait ends at the timeout with an error naming it.
  o.master_port = free_local_port();
  o.timeout_s = 2;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    DataParallelGroup g(o);
    FAIL("a group of 2 formed with one rank");
  } catch (const Error& e) {
    REQUIRE(e.kind() == ErrorKind::Io);
    REQUIRE_THAT(std::string(e.what()), Catch::Contains("could not join the group at 127.0.0.1:" +
                                                        std::to_string(o.master_port)));
  }
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
}
