// Retention-gate files.
//
// Our format: a .safetensors file ("retention_gates.safetensors" in a model folder) whose tensors
// carry the reference names (retention_gates.h), every layer listed, tied tensors repeated under
// each layer exactly as the reference state dict lists them, float32. Its __metadata__ holds:
//   format = "trimkv-gates", format_version = "1", kind = dbtrimkv|trimkv, tied = true|false,
//   n_layer, n_kv_head, hidden_size, gate_hidden, bias_init, init_std, train_budget
// plus free-form provenance (model, steps, ...) passed by the writer.
//
// Imported format: the authors' released "trimkv_weights.pth" (torch.save of a state dict; keys
// "...layers.{l}.self_attn.retention_gate.<leaf>", with any prefix such as "model." or
// "model.language_model."; any float dtype). Kind, sizes and tying are inferred from the tensors:
// linear3 present -> DBTrimKV, always tied (the release's layout): the linear3/bias copies of
// every layer must be bitwise equal, a file whose copies differ is refused naming the key.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "trimkv/core/model_config.h"
#include "trimkv/core/retention_gates.h"

namespace trimkv {

constexpr const char* kGatesFileName = "retention_gates.safetensors";
constexpr const char* kReferenceGatesFileName = "trimkv_weights.pth";

// Writes `gates` (converted to float32) to `path` atomically (temp file + rename).
void save_gates(const std::string& path, const RetentionGates& gates,
                const std::map<std::string, std::string>& extra_metadata = {});

// Writes `gates` as the authors' release does (trimkv_weights.pth: torch.save of a dict holding
// every reference tensor, tied ones repeated under each layer, float32), the "model." of the
// names replaced by `prefix` (Qwen-VL checkpoints: "model.language_model."). torch.load and
// this program's load_gates read it back. Written to a temp file, then renamed.
void save_gates_pth(const std::string& path, const RetentionGates& gates, const std::string& prefix = "model.");

// Error{Input} naming `path` when gates of `config` cannot be written as a .pth (the untied
// ablation: the authors' layout is tied). Checked before training starts.
void check_pth_writable(const GateConfig& config, const std::string& path);
bool is_pth_path(const std::string& path);

// save_gates_pth for a path ending in ".pth", save_gates otherwise (metadata only there).
void save_gates_file(const std::string& path, const RetentionGates& gates, const std::string& pth_prefix,
                     const std::map<std::string, std::string>& extra_metadata = {});

// Loads a gates file (.safetensors ours, .pth the reference's; chosen by content, not by name).
// Errors name the file: Io (missing), Format (neither format, missing / inconsistent tensors).
RetentionGates load_gates(const std::string& path);

// Metadata of one of our gate files ({} for a .pth).
std::map<std::string, std::string> gates_file_metadata(const std::string& path);

// Error{Config} naming the file and every mismatch when `gates` do not fit the model
// (layers, KV heads, hidden size).
void check_gates_fit(const RetentionGates& gates, const TextConfig& model, const std::string& gates_path,
                     const std::string& model_dir);

// The gates file that belongs to a model folder: retention_gates.safetensors, else
// trimkv_weights.pth; "" when it has neither.
std::string find_gates_file(const std::string& model_dir);

// Internal (gate_file_pth.cpp): the float32 tensors of a torch.save'd state dict, by key; and a
// dict of tensors written as torch.save does.
std::map<std::string, at::Tensor> read_torch_state_dict(const std::string& path);
void write_torch_state_dict(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors);

}  // namespace trimkv
