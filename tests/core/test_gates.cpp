// Retention gates (METHOD.md §2): init, tying, the decoder hook, files (ours and the reference's
// trimkv_weights.pth), refusal of gates made for another model. Oracles: tests/oracle/gate_fixtures.py
// (our own torch code) and tests/oracle/authors_gates_fixtures.py (the authors' trimkv package).
#include <ATen/ATen.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <tuple>

#include "test_util.h"
#include "trimkv/core/engine.h"
#include "trimkv/core/error.h"
#include "trimkv/core/gate_file.h"
#include "trimkv/core/generation.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/retention_gates.h"
#include "trimkv/core/text_model.h"
#include "trimkv/core/weight_store.h"

using namespace trimkv;

namespace {

std::string gates_fixture(const std::string& name) { return test::data_dir() + "/gates/" + name; }

void require_same_tensors(const RetentionGates& a, const RetentionGates& b) {
  auto ta = a.named_tensors(), tb = b.named_tensors();
  REQUIRE(ta.size() == tb.size());
  for (size_t i = 0; i < ta.size(); ++i) {
    CAPTURE(ta[i].name);
    REQUIRE(ta[i].name == tb[i].name);
    REQUIRE(at::equal(ta[i].tensor, tb[i].tensor));
  }
}

at::Tensor ids_tensor(const std::vector<int32_t>& ids) {
  return at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong);
}

}  // namespace

TEST_CASE("RetentionGates::init: output bias 18, inner biases 0, weights N(0, 0.02)", "[gates]") {
  TextModel m = load_text_model(test::model_dir("llama_gqa"));
  for (GateKind kind : {GateKind::DBTrimKV, GateKind::TrimKV}) {
    CAPTURE(gate_kind_name(kind));
    GateConfig cfg = GateConfig::for_model(m.config, kind);
    RetentionGates g = RetentionGates::init(cfg, 7);
    for (const auto& l : g.layers()) {
      REQUIRE(at::equal(l.bias, at::full({cfg.n_kv_head}, 18.0, at::kFloat)));
      REQUIRE(at::equal(l.b1, at::zeros({cfg.gate_hidden}, at::kFloat)));
      if (kind == GateKind::DBTrimKV) REQUIRE(at::equal(l.b2, at::zeros({cfg.gate_hidden}, at::kFloat)));
      // 512 x 64 samples: the standard deviation is within a few percent of 0.02.
      REQUIRE(l.w1.std().item<double>() == Approx(0.02).epsilon(0.05));
      REQUIRE(std::abs(l.w1.mean().item<double>()) < 0.002);
    }
    // β = σ(≈18) ≈ 1: nothing is forgotten at the start.
    at::Tensor lb = g.log_beta(1, at::randn({5, cfg.hidden_size}));
    REQUIRE(lb.sizes() == at::IntArrayRef({5, cfg.n_kv_head}));
    REQUIRE(lb.max().item<double>() <= 0.0);
    REQUIRE(lb.min().item<double>() > -1e-6);
    // Same seed, same gates; another seed, other gates.
    require_same_tensors(g, RetentionGates::init(cfg, 7));
    REQUIRE_FALSE(at::equal(g.layers()[0].w1, RetentionGates::init(cfg, 8).layers()[0].w1));
  }
}

TEST_CASE("DBTrimKV gates share one output projection and bias; the untied ablation does not", "[gates]") {
  GateConfig cfg;
  cfg.kind = GateKind::DBTrimKV;
  cfg.n_layer = 3, cfg.hidden_size = 16, cfg.n_kv_head = 2, cfg.gate_hidden = 8;
  RetentionGates tied = RetentionGates::init(cfg, 1);
  for (const auto& l : tied.layers()) {
    REQUIRE(l.w3.is_same(tied.layers()[0].w3));
    REQUIRE(l.bias.is_same(tied.layers()[0].bias));
  }
  const int64_t per_layer = 8 * 16 + 8 + 8 * 8 + 8;
  REQUIRE(tied.parameter_count() == 3 * per_layer + 2 * 8 + 2);
  cfg.tied = false;
  RetentionGates untied = RetentionGates::init(cfg, 1);
  REQUIRE_FALSE(untied.layers()[1].w3.is_same(untied.layers()[0].w3));
  REQUIRE(untied.parameter_count() == 3 * (per_layer + 2 * 8 + 2));
  cfg.kind = GateKind::TrimKV;
  RetentionGates trim = RetentionGates::init(cfg, 1);
  REQUIRE_FALSE(trim.layers()[0].w3.defined());
  REQUIRE(trim.parameter_count() == 3 * (8 * 16 + 8 + 2 * 8 + 2));
  // A change through layer 0's shared tensor is seen by every layer (one module, as the reference).
  tied.layers()[0].bias.add_(1.0);
  REQUIRE(tied.layers()[2].bias[0].item<float>() == Approx(19.0));
}

TEST_CASE("Gates file save -> load round trip is exact and keeps kind, tying and metadata", "[gates]") {
  test::ScratchDir dir("gates");
  GateConfig cfg;
  cfg.n_layer = 2, cfg.hidden_size = 12, cfg.n_kv_head = 3, cfg.gate_hidden = 6, cfg.train_budget = 32;
  for (auto [kind, tied] : {std::pair{GateKind::DBTrimKV, true}, std::pair{GateKind::DBTrimKV, false},
                            std::pair{GateKind::TrimKV, false}}) {
    cfg.kind = kind;
    cfg.tied = tied;
    RetentionGates g = RetentionGates::init(cfg, 3);
    const std::string path = dir.file("g.safetensors");
    save_gates(path, g, {{"model", "tiny"}});
    RetentionGates back = load_gates(path);
    require_same_tensors(g, back);
    REQUIRE(back.config().kind == kind);
    REQUIRE(back.config().is_tied() == (kind == GateKind::DBTrimKV && tied));
    REQUIRE(back.config().train_budget == 32);
    if (back.config().is_tied()) REQUIRE(back.layers()[1].w3.is_same(back.layers()[0].w3));
    auto meta = gates_file_metadata(path);
    REQUIRE(meta.at("model") == "tiny");
    REQUIRE(meta.at("kind") == gate_kind_name(kind));
    REQUIRE(meta.at("n_layer") == "2");
    // Every reference name is present, tied tensors repeated per layer.
    SafetensorsFile f(path);
    REQUIRE(f.tensors().count("model.layers.1.self_attn.retention_gate.linear1.weight"));
    REQUIRE(f.tensors().count("model.layers.1.self_attn.retention_gate.bias"));
    REQUIRE(f.tensors().count("model.layers.1.self_attn.retention_gate.linear3.weight") ==
            (kind == GateKind::DBTrimKV ? 1u : 0u));
  }
}

TEST_CASE("trimkv_weights.pth written by torch.save imports equal to the same gates in our format", "[gates][oracle]") {
  RetentionGates ours = load_gates(gates_fixture("llama_gqa_dbtrimkv.safetensors"));
  RetentionGates pth = load_gates(gates_fixture("trimkv_weights.pth"));  // keys under model.language_model.
  require_same_tensors(ours, pth);
  REQUIRE(pth.config().kind == GateKind::DBTrimKV);
  REQUIRE(pth.config().is_tied());  // inferred: linear3/bias bitwise equal in every layer
  REQUIRE(pth.layers()[1].bias.is_same(pth.layers()[0].bias));
  REQUIRE(pth.config().gate_hidden == 32);
  REQUIRE(gates_file_metadata(gates_fixture("trimkv_weights.pth")).empty());
}

namespace {
// Inference attention is plain (β only ranks entries): records each layer's log β along the plain
// dense path by handing the decoder zeros.
struct LogBetaRecorder : EntryScorer {
  const RetentionGates* g = nullptr;
  mutable std::vector<at::Tensor> seen;
  at::Tensor log_beta(int64_t il, const at::Tensor& x) const override {
    seen.push_back(g->log_beta(il, x));
    return at::zeros_like(seen.back());
  }
};

// A cache prefilled with `ids` in chunks of `chunk` tokens, the gates scoring every entry.
KvCache prefilled_with_gates(const TextModel& m, const RetentionGates& g, const std::vector<int32_t>& ids, int chunk) {
  KvCache cache(kv_geometry_of(m.config));
  TextRunner runner(m, cache, chunk);
  runner.set_eviction(nullptr, &g);
  runner.prefill(ids);
  return cache;
}
}  // namespace

TEST_CASE("trimkv_weights.pth saved from the authors' own model classes: read, fits, same log beta as their gates",
          "[gates][oracle][authors]") {
  // Written by tests/oracle/authors_gates_fixtures.py with the authors' PyPI package (trimkv 0.1.5):
  // their TrimKVLlamaForCausalLM ('rg10' gates, tied: DBTrimKV) on llama_gqa and
  // TrimKVQwen3ForCausalLM ('rg': TrimKV) on qwen3, the file their from_pretrained accepts, and
  // for the same tokens their gate modules' outputs on their model's hidden states (eval mode,
  // plain attention) and their training form's log β and logits (gated flex attention).
  const std::string dir = gates_fixture("authors");
  const auto j = test::read_json(dir + "/expected.json");
  WeightStore expected = WeightStore::open_file(dir + "/expected.safetensors");
  REQUIRE(j["cases"].size() == 2);
  for (const auto& [name, c] : j["cases"].items()) {
    CAPTURE(name);
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const int64_t n = static_cast<int64_t>(ids.size());
    const std::string model_dir = test::model_dir(c["model"].get<std::string>());
    const std::string pth = dir + "/" + name + "/trimkv_weights.pth";
    const std::string kind = c["kind"].get<std::string>();
    // What `trimkv info --model DIR --gates FILE` checks: the file against the model's config.
    const GatesFileInfo info = check_gates_file(pth, model_dir);
    REQUIRE(info.kind == kind);
    REQUIRE(info.tied == c["tied"].get<bool>());
    REQUIRE(info.n_layer == c["n_layer"].get<int64_t>());
    REQUIRE(info.n_kv_head == c["n_kv_head"].get<int64_t>());
    REQUIRE(info.gate_hidden == c["gate_hidden"].get<int64_t>());
    REQUIRE(read_torch_state_dict(pth).size() == c["n_keys"].get<size_t>());
    const RetentionGates g = load_gates(pth);
    if (info.tied)
      for (const auto& l : g.layers()) REQUIRE((l.w3.is_same(g.layers()[0].w3) && l.bias.is_same(g.layers()[0].bias)));

    // Our log β on the plain (inference) path equals their gate modules' outputs.
    TextModel m = load_text_model(model_dir);
    LogBetaRecorder rec;
    rec.g = &g;
    m.decoder->forward_dense(m.decoder->embed(ids_tensor(ids)), at::arange(n, at::kLong), {}, &rec);
    REQUIRE(static_cast<int64_t>(rec.seen.size()) == m.config.n_layer);
    std::vector<at::Tensor> theirs;
    for (int64_t l = 0; l < m.config.n_layer; ++l) {
      theirs.push_back(expected.load({name + ".log_beta." + std::to_string(l)}, {n, m.config.n_kv_head}));
      CAPTURE(l);
      REQUIRE(rec.seen[l].scalar_type() == at::kFloat);
      REQUIRE((rec.seen[l] - theirs[l]).abs().max().item<double>() < 1e-5);
    }
    // And so does the log β a chunked prefill stores in the cache entries (its layer-1 inputs are
    // summed in another order: up to 5e-6 measured).
    const KvCache cache = prefilled_with_gates(m, g, ids, 5);
    for (int il = 0; il < m.config.n_layer; ++il)
      for (int h = 0; h < m.config.n_kv_head; ++h) {
        const auto& entries = cache.bookkeeping().entries(il, h);
        REQUIRE(static_cast<int64_t>(entries.size()) == n);
        for (const auto& e : entries)
          REQUIRE(e.log_beta == Approx(theirs[il][e.token_index][h].item<float>()).margin(2e-5));
      }
    // Their training form (train mode, flex attention adding (t - i)·log β_i): our gated dense
    // forward gives the same log β per layer (from layer 1 on, gate inputs that depend on the
    // gated attention before) and the same logits.
    std::vector<at::Tensor> lbs;
    at::Tensor hs = m.decoder->forward_dense(m.decoder->embed(ids_tensor(ids)), at::arange(n, at::kLong), {}, &g, &lbs);
    REQUIRE(static_cast<int64_t>(lbs.size()) == m.config.n_layer);
    for (int64_t l = 0; l < m.config.n_layer; ++l) {
      CAPTURE(l);
      at::Tensor want = expected.load({name + ".gated.log_beta." + std::to_string(l)}, {n, m.config.n_kv_head});
      REQUIRE((lbs[l] - want).abs().max().item<double>() < 1e-5);
    }
    at::Tensor want_logits = expected.load({name + ".gated.logits"}, {n, m.config.vocab_size});
    REQUIRE((m.decoder->logits(hs) - want_logits).abs().max().item<double>() < 1e-4);
    // The engine takes it as --gates for that model.
    EngineOptions opt;
    opt.gates = pth;
    REQUIRE(Engine::load(model_dir, opt)->info().gates_kind == kind);
  }
}

TEST_CASE("Gated dense forward reproduces the oracle's log beta and student logits", "[gates][oracle]") {
  TextModel m = load_text_model(test::model_dir("llama_gqa"));
  auto j = test::read_json(gates_fixture("expected.json"));
  WeightStore expected = WeightStore::open_file(gates_fixture("expected.safetensors"));
  const auto ids = j["ids"].get<std::vector<int32_t>>();
  const auto label_pos = j["label_positions"].get<std::vector<int64_t>>();
  for (const std::string kind : {"dbtrimkv", "trimkv"}) {
    CAPTURE(kind);
    RetentionGates g = load_gates(gates_fixture("llama_gqa_" + kind + ".safetensors"));
    std::vector<at::Tensor> lbs;
    const int64_t n = static_cast<int64_t>(ids.size());
    at::Tensor h = m.decoder->forward_dense(m.decoder->embed(ids_tensor(ids)), at::arange(n, at::kLong), {}, &g, &lbs);
    REQUIRE(static_cast<int64_t>(lbs.size()) == m.config.n_layer);
    for (size_t l = 0; l < lbs.size(); ++l) {
      at::Tensor want = expected.load({kind + ".log_beta." + std::to_string(l)}, {n, m.config.n_kv_head});
      REQUIRE((lbs[l] - want).abs().max().item<double>() < 1e-5);
    }
    at::Tensor logits = m.decoder->logits(h).index_select(0, at::tensor(label_pos, at::kLong));
    at::Tensor want = expected.load({kind + ".student_logits"}, {});
    REQUIRE((logits - want).abs().max().item<double>() < 1e-4);
  }
}

TEST_CASE("forward_cached stores the gate's log beta in every new cache entry", "[gates]") {
  TextModel m = load_text_model(test::model_dir("llama_gqa"));
  RetentionGates g = load_gates(gates_fixture("llama_gqa_trimkv.safetensors"));
  const std::vector<int32_t> ids = {5, 17, 200, 31, 9, 77, 123};
  const int64_t n = static_cast<int64_t>(ids.size());
  LogBetaRecorder rec;  // the plain dense path's log β
  rec.g = &g;
  m.decoder->forward_dense(m.decoder->embed(ids_tensor(ids)), at::arange(n, at::kLong), {}, &rec);
  const std::vector<at::Tensor>& dense_lb = rec.seen;
  const KvCache cache = prefilled_with_gates(m, g, ids, 3);
  for (int il = 0; il < m.config.n_layer; ++il)
    for (int h = 0; h < m.config.n_kv_head; ++h) {
      const auto& entries = cache.bookkeeping().entries(il, h);
      REQUIRE(static_cast<int64_t>(entries.size()) == n);
      for (const auto& e : entries) {
        REQUIRE(e.log_beta < 0.0f);
        REQUIRE(e.log_beta == Approx(dense_lb[il][e.token_index][h].item<float>()).margin(1e-5));
      }
    }
}

TEST_CASE("A gates file made for another model is refused, naming the file and the mismatch", "[gates]") {
  TextModel other = load_text_model(test::model_dir("llama_tied"));  // 3 layers, the gates have 2
  const std::string path = gates_fixture("llama_gqa_dbtrimkv.safetensors");
  RetentionGates g = load_gates(path);
  try {
    check_gates_fit(g, other.config, path, other.dir);
    FAIL("no error");
  } catch (const Error& e) {
    REQUIRE(e.kind() == ErrorKind::Config);
    const std::string msg = e.what();
    REQUIRE_THAT(msg, Catch::Contains("llama_gqa_dbtrimkv.safetensors"));
    REQUIRE_THAT(msg, Catch::Contains("layers: gates 2, model 3"));
  }
  EngineOptions opt;
  opt.gates = path;
  REQUIRE_THROWS_WITH(Engine::load(test::model_dir("llama_tied"), opt), Catch::Contains("does not fit model"));
  REQUIRE_THROWS_AS(Engine::load(test::model_dir("qwen3"), opt), Error);  // hidden size 48 vs 64
}

TEST_CASE("Engine finds the gates file in the model folder, takes --gates, and 'none' disables", "[gates]") {
  test::ScratchDir dir("gates-engine");
  test::copy_model("llama_gqa", dir.path());
  {
    auto e = Engine::load(dir.path());
    REQUIRE(e->info().gates_file.empty());
  }
  std::filesystem::copy(gates_fixture("trimkv_weights.pth"), dir.file("trimkv_weights.pth"));
  {
    auto e = Engine::load(dir.path());
    REQUIRE(e->info().gates_file == find_gates_file(dir.path()));
    REQUIRE(e->info().gates_kind == "dbtrimkv");
  }
  save_gates(dir.file(kGatesFileName), load_gates(gates_fixture("llama_gqa_trimkv.safetensors")));
  auto e = Engine::load(dir.path());  // ours wins over the .pth
  REQUIRE(e->info().gates_kind == "trimkv");
  GenerationParams p;
  p.max_new_tokens = 4;
  p.stop_at_eos = false;
  REQUIRE(e->generate({1, 2, 3, 4}, p).tokens.size() == 4);
  EngineOptions none;
  none.gates = "none";
  REQUIRE(Engine::load(dir.path(), none)->info().gates_file.empty());
  EngineOptions given;
  given.gates = gates_fixture("llama_gqa_dbtrimkv.safetensors");
  REQUIRE(Engine::load(dir.path(), given)->info().gates_kind == "dbtrimkv");
}

TEST_CASE("Loading a gates file that is missing or holds no gates fails with a clear error", "[gates]") {
  REQUIRE_THROWS_WITH(load_gates("/nonexistent/g.safetensors"), Catch::Contains("does not exist"));
  try {
    load_gates(test::model_dir("llama_gqa") + "/model.safetensors");
    FAIL("no error");
  } catch (const Error& e) {
    REQUIRE(e.kind() == ErrorKind::Format);
    REQUIRE_THAT(std::string(e.what()), Catch::Contains("not a retention-gates file"));
  }
  test::ScratchDir dir("gates-bad");
  write_safetensors(dir.file("empty.safetensors"), {{"x", DType::F32, {1}, std::vector<uint8_t>(4, 0)}});
  REQUIRE_THROWS_WITH(load_gates(dir.file("empty.safetensors")), Catch::Contains("no retention-gate tensors"));
  test::write_text(dir.file("x.pth"), std::string("PK\x03\x04garbage", 11));
  REQUIRE_THROWS_AS(load_gates(dir.file("x.pth")), Error);
}

namespace {
// A config.json with Qwen3-VL-4B-Instruct's text sizes (and its vision section), no weights.
void write_qwen3_vl_4b_config(const std::string& dir) {
  trimkv::test::write_text(dir + "/config.json", R"({
    "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
    "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652, "vision_end_token_id": 151653,
    "tie_word_embeddings": true,
    "text_config": {"model_type": "qwen3_vl_text", "vocab_size": 151936, "hidden_size": 2560, "intermediate_size": 9728,
      "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
      "max_position_embeddings": 262144, "rms_norm_eps": 1e-6,
      "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": true},
      "rope_theta": 5000000},
    "vision_config": {"model_type": "qwen3_vl", "depth": 24, "hidden_size": 1024, "intermediate_size": 4096,
      "num_heads": 16, "out_hidden_size": 2560, "patch_size": 16, "num_position_embeddings": 2304,
      "deepstack_visual_indexes": [5, 11, 17]}})");
}

GateConfig released_shape(int64_t layers, int64_t hidden, int64_t width = 512) {
  GateConfig c;
  c.kind = GateKind::DBTrimKV;
  c.n_layer = layers;
  c.hidden_size = hidden;
  c.n_kv_head = 8;
  c.gate_hidden = width;
  c.tied = true;
  c.bias_init = 10.0;  // the authors' retention_gate_bias_init
  return c;
}
}  // namespace

TEST_CASE("Gates in the released Qwen3-VL-4B layout validate against its config alone; wrong shapes are refused",
          "[gates][pth]") {
  trimkv::test::ScratchDir dir("gates-4b");
  write_qwen3_vl_4b_config(dir.path());
  // The release's shapes (36 layers, hidden 2560, 8 KV heads, width 512, tied), written as the
  // authors' trimkv_weights.pth: keys under model.language_model.
  const RetentionGates gates = RetentionGates::init(released_shape(36, 2560), 5);
  const std::string pth = dir.file("trimkv_weights.pth");
  save_gates_pth(pth, gates, "model.language_model.");
  const auto keys = read_torch_state_dict(pth);
  REQUIRE(keys.size() == 36 * 6);  // linear1/2 weight+bias, linear3.weight and bias per layer
  REQUIRE(keys.count("model.language_model.layers.35.self_attn.retention_gate.linear3.weight"));
  REQUIRE(keys.at("model.language_model.layers.7.self_attn.retention_gate.linear1.weight").sizes() ==
          at::IntArrayRef({512, 2560}));
  const GatesFileInfo info = check_gates_file(pth, dir.path());
  REQUIRE((info.kind == "dbtrimkv" && info.tied && info.n_layer == 36 && info.hidden_size == 2560 &&
           info.n_kv_head == 8 && info.gate_hidden == 512));
  REQUIRE(info.model_type == "qwen3_vl_text");
  // Read back: the same numbers (tying restored from the repeated copies).
  const RetentionGates back = load_gates(pth);
  REQUIRE(back.config().is_tied());
  const at::Tensor x = at::randn({3, 2560});
  REQUIRE(at::equal(back.log_beta(20, x), gates.log_beta(20, x)));
  // Another model's gates.
  for (const auto& [layers, hidden, what] : {std::tuple<int64_t, int64_t, const char*>{35, 2560, "35"},
                                             std::tuple<int64_t, int64_t, const char*>{36, 2048, "2048"}}) {
    CAPTURE(layers, hidden);
    const std::string bad = dir.file("bad.pth");
    save_gates_pth(bad, RetentionGates::init(released_shape(layers, hidden, 16), 6), "model.language_model.");
    REQUIRE_THROWS_WITH(check_gates_file(bad, dir.path()), Catch::Contains("bad.pth") && Catch::Contains(what));
  }
  REQUIRE_THROWS_WITH(check_gates_file(dir.file("config.json"), dir.path()), Catch::Contains("config.json"));
  // A release file with a key missing, or with a layer too many: refused naming the file.
  const RetentionGates small = RetentionGates::init(released_shape(3, 64, 16), 7);
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const GateParameter& p : small.named_tensors()) named.emplace_back("model.language_model." + p.name.substr(6), p.tensor);
  auto without = named;
  without.erase(without.begin() + 3);
  write_torch_state_dict(dir.file("missing.pth"), without);
  REQUIRE_THROWS_WITH(load_gates(dir.file("missing.pth")), Catch::Contains("missing.pth"));
  auto extra = named;
  extra.emplace_back("model.language_model.layers.7.self_attn.retention_gate.linear1.weight", at::zeros({16, 64}));
  write_torch_state_dict(dir.file("extra.pth"), extra);
  REQUIRE_THROWS_WITH(load_gates(dir.file("extra.pth")), Catch::Contains("extra.pth"));
  // Tied copies that differ (one layer's bias, then one's linear3): refused naming the file and
  // the key, not read as untied gates.
  for (const char* leaf : {"layers.2.self_attn.retention_gate.bias", "layers.1.self_attn.retention_gate.linear3.weight"}) {
    CAPTURE(leaf);
    auto differ = named;
    for (auto& [key, t] : differ)
      if (key == std::string("model.language_model.") + leaf) t = t.clone().add(1e-3);
    write_torch_state_dict(dir.file("differ.pth"), differ);
    REQUIRE_THROWS_WITH(load_gates(dir.file("differ.pth")), Catch::Contains("differ.pth") &&
                                                                 Catch::Contains(std::string("model.language_model.") + leaf) &&
                                                                 Catch::Contains("differs from layer 0"));
    REQUIRE_THROWS_WITH(check_gates_file(dir.file("differ.pth"), dir.path()), Catch::Contains("differ.pth"));
  }
  // Untied (ablation) gates have no .pth layout: refused before writing, named.
  GateConfig untied = released_shape(3, 64, 16);
  untied.tied = false;
  REQUIRE_THROWS_WITH(save_gates_pth(dir.file("untied.pth"), RetentionGates::init(untied, 8)),
                      Catch::Contains("untied.pth") && Catch::Contains("safetensors"));
  REQUIRE_FALSE(std::filesystem::exists(dir.file("untied.pth")));
}
