#include "trimkv/core/gate_file.h"

#include <ATen/ATen.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "trimkv/core/error.h"
#include "trimkv/core/safetensors.h"
#include "trimkv/core/weight_store.h"

namespace fs = std::filesystem;

namespace trimkv {

namespace {

constexpr const char* kGateInfix = ".self_attn.retention_gate.";

std::string to_str(int64_t v) { return std::to_string(v); }
std::string to_str(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

// "…layers.{l}.self_attn.retention_gate.<leaf>" -> (l, leaf); false for other keys.
bool parse_gate_key(const std::string& key, int64_t& il, std::string& leaf) {
  const size_t at = key.find(kGateInfix);
  if (at == std::string::npos) return false;
  const size_t dot = key.rfind("layers.", at);
  if (dot == std::string::npos) return false;
  const std::string num = key.substr(dot + 7, at - dot - 7);
  if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos) return false;
  il = std::stoll(num);
  leaf = key.substr(at + std::strlen(kGateInfix));
  return true;
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && at::equal(a, b);
}

// Builds gates from {reference key -> float32 tensor}; `meta` (ours) may be empty (.pth).
RetentionGates gates_from_tensors(const std::map<std::string, at::Tensor>& named,
                                  const std::map<std::string, std::string>& meta,
                                  const std::string& path) {
  std::map<int64_t, std::map<std::string, at::Tensor>> by_layer;
  std::map<std::pair<int64_t, std::string>, std::string> file_key;  // (layer, leaf) -> the name in the file
  for (const auto& [key, t] : named) {
    int64_t il = 0;
    std::string leaf;
    if (!parse_gate_key(key, il, leaf)) continue;
    TRIMKV_CHECK(!by_layer[il].count(leaf), Format, "gates file '", path, "' has two tensors for layer ",
                 il, " '", leaf, "' (under different prefixes)");
    by_layer[il][leaf] = t;
    file_key[{il, leaf}] = key;
  }
  TRIMKV_CHECK(!by_layer.empty(), Format, "'", path,
               "' holds no retention-gate tensors (expected names like "
               "'model.layers.0.self_attn.retention_gate.linear1.weight')");
  const int64_t n_layer = static_cast<int64_t>(by_layer.size());
  TRIMKV_CHECK(by_layer.rbegin()->first == n_layer - 1, Format, "gates file '", path,
               "' has gates for ", n_layer, " layers but the highest layer index is ",
               by_layer.rbegin()->first, ": some layers are missing");
  auto need = [&](int64_t il, const std::string& leaf) -> const at::Tensor& {
    auto it = by_layer[il].find(leaf);
    TRIMKV_CHECK(it != by_layer[il].end(), Format, "gates file '", path, "' lacks tensor '",
                 gate_tensor_name(il, leaf), "'");
    return it->second;
  };
  const bool db = by_layer[0].count("linear3.weight") != 0;
  GateConfig cfg;
  cfg.kind = db ? GateKind::DBTrimKV : GateKind::TrimKV;
  if (meta.count("kind")) {
    TRIMKV_CHECK(parse_gate_kind(meta.at("kind")) == cfg.kind, Format, "gates file '", path,
                 "' says kind '", meta.at("kind"), "' but its tensors are those of ",
                 gate_kind_name(cfg.kind));
  }
  const at::Tensor& w1 = need(0, "linear1.weight");
  const at::Tensor& bias = need(0, "bias");
  TRIMKV_CHECK(w1.dim() == 2 && bias.dim() == 1, Format, "gates file '", path,
               "': linear1.weight must be 2-D and bias 1-D");
  cfg.n_layer = n_layer;
  cfg.gate_hidden = w1.size(0);
  cfg.hidden_size = w1.size(1);
  cfg.n_kv_head = bias.size(0);
  if (meta.count("bias_init")) cfg.bias_init = std::stod(meta.at("bias_init"));
  if (meta.count("init_std")) cfg.init_std = std::stod(meta.at("init_std"));
  if (meta.count("train_budget")) cfg.train_budget = std::stoll(meta.at("train_budget"));
  // Tied: as our metadata says. A file without it (the authors' .pth) is the released layout,
  // tied: its state dict repeats the shared linear3/bias in every layer, and copies that differ
  // mean a damaged or foreign file, refused rather than guessed into the untied ablation.
  bool tied = false;
  if (db) {
    std::string first_difference;
    for (int64_t il = 1; il < n_layer && first_difference.empty(); ++il)
      for (const char* leaf : {"linear3.weight", "bias"})
        if (first_difference.empty() && !bitwise_equal(need(il, leaf), need(0, leaf)))
          first_difference = file_key.at({il, std::string(leaf)});
    tied = meta.count("tied") ? meta.at("tied") == "true" : true;
    TRIMKV_CHECK(!tied || first_difference.empty(), Format, "gates file '", path, "': tensor '", first_difference,
                 "' differs from layer 0's copy, but ",
                 meta.count("tied") ? "the file says its output projection is tied"
                                    : "the authors' layout ties linear3 and bias across layers (each layer "
                                      "repeats the shared tensors); the file is damaged or not a release file. "
                                      "Untied (ablation) gates are read from our .safetensors format only");
  }
  cfg.tied = db ? tied : false;
  std::vector<GateLayer> layers;
  for (int64_t il = 0; il < n_layer; ++il) {
    GateLayer g;
    g.w1 = need(il, "linear1.weight");
    g.b1 = need(il, "linear1.bias");
    g.w2 = need(il, "linear2.weight");
    if (db) {
      g.b2 = need(il, "linear2.bias");
      g.w3 = tied && il > 0 ? layers[0].w3 : need(il, "linear3.weight");
    }
    g.bias = tied && il > 0 ? layers[0].bias : need(il, "bias");
    layers.push_back(std::move(g));
  }
  try {
    return RetentionGates(cfg, std::move(layers));
  } catch (const Error& e) {
    TRIMKV_FAIL(Format, "gates file '", path, "': ", e.what());
  }
}

bool starts_with_zip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4;
}

}  // namespace

void save_gates(const std::string& path, const RetentionGates& gates,
                const std::map<std::string, std::string>& extra_metadata) {
  const GateConfig& c = gates.config();
  std::map<std::string, std::string> meta = extra_metadata;
  meta["format"] = "trimkv-gates";
  meta["format_version"] = "1";
  meta["kind"] = gate_kind_name(c.kind);
  meta["tied"] = c.is_tied() ? "true" : "false";
  meta["n_layer"] = to_str(c.n_layer);
  meta["n_kv_head"] = to_str(c.n_kv_head);
  meta["hidden_size"] = to_str(c.hidden_size);
  meta["gate_hidden"] = to_str(c.gate_hidden);
  meta["bias_init"] = to_str(c.bias_init);
  meta["init_std"] = to_str(c.init_std);
  meta["train_budget"] = to_str(c.train_budget);
  std::vector<TensorToWrite> out;
  for (const auto& p : gates.named_tensors()) out.push_back(float_tensor_to_write(p.name, p.tensor));
  write_safetensors(path, out, meta);
}

void save_gates_pth(const std::string& path, const RetentionGates& gates, const std::string& prefix) {
  check_pth_writable(gates.config(), path);
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const GateParameter& p : gates.named_tensors()) {
    TRIMKV_ASSERT(p.name.rfind("model.", 0) == 0);
    out.emplace_back(prefix + p.name.substr(6), p.tensor.to(at::kFloat));
  }
  write_torch_state_dict(path, out);
}

void check_pth_writable(const GateConfig& config, const std::string& path) {
  TRIMKV_CHECK(config.kind != GateKind::DBTrimKV || config.is_tied(), Input, "'", path,
               "': untied DBTrimKV gates cannot be written in the authors' .pth layout (it ties linear3 and "
               "bias across layers); write .safetensors instead");
}

bool is_pth_path(const std::string& path) {
  return path.size() >= 4 && path.compare(path.size() - 4, 4, ".pth") == 0;
}

void save_gates_file(const std::string& path, const RetentionGates& gates, const std::string& pth_prefix,
                     const std::map<std::string, std::string>& extra_metadata) {
  if (is_pth_path(path)) save_gates_pth(path, gates, pth_prefix);
  else save_gates(path, gates, extra_metadata);
}

std::map<std::string, std::string> gates_file_metadata(const std::string& path) {
  if (starts_with_zip(path)) return {};
  return SafetensorsFile(path).metadata();
}

RetentionGates load_gates(const std::string& path) {
  TRIMKV_CHECK(fs::is_regular_file(path), Io, "gates file '", path, "' does not exist");
  if (starts_with_zip(path)) return gates_from_tensors(read_torch_state_dict(path), {}, path);
  SafetensorsFile file(path);
  std::map<std::string, at::Tensor> named;
  for (const auto& [name, info] : file.tensors()) {
    int64_t il = 0;
    std::string leaf;
    if (parse_gate_key(name, il, leaf)) named[name] = tensor_to_float(info);
  }
  const auto& meta = file.metadata();
  if (meta.count("format"))
    TRIMKV_CHECK(meta.at("format") == "trimkv-gates", Format, "'", path, "' is a '", meta.at("format"),
                 "' file, not a retention-gates file");
  return gates_from_tensors(named, meta, path);
}

void check_gates_fit(const RetentionGates& gates, const TextConfig& model, const std::string& gates_path,
                     const std::string& model_dir) {
  const GateConfig& g = gates.config();
  std::string problems;
  auto cmp = [&](const char* what, int64_t have, int64_t want) {
    if (have != want)
      problems += std::string(problems.empty() ? "" : "; ") + what + ": gates " + std::to_string(have) +
                  ", model " + std::to_string(want);
  };
  cmp("layers", g.n_layer, model.n_layer);
  cmp("KV heads", g.n_kv_head, model.n_kv_head);
  cmp("hidden size", g.hidden_size, model.hidden_size);
  TRIMKV_CHECK(problems.empty(), Config, "gates file '", gates_path, "' does not fit model '", model_dir,
               "' (", problems, ")");
}

std::string find_gates_file(const std::string& model_dir) {
  for (const char* name : {kGatesFileName, kReferenceGatesFileName}) {
    const fs::path p = fs::path(model_dir) / name;
    if (fs::is_regular_file(p)) return p.string();
  }
  return "";
}

}  // namespace trimkv
