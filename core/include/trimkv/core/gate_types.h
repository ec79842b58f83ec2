// Plain names of the retention-gate variants and capacity losses (no LibTorch: app/ uses them).
#pragma once
#include <string>

namespace trimkv {

// TrimKV ("rg"): d -> H -> H_kv per layer. DBTrimKV ("rg10"): d -> H -> H -> H_kv with the output
// projection and bias shared by all layers (METHOD.md §2).
enum class GateKind { TrimKV, DBTrimKV };

const char* gate_kind_name(GateKind kind);  // "trimkv" | "dbtrimkv"
// Accepts trimkv | rg | dbtrimkv | rg10 (case-sensitive); Error{Input} otherwise.
GateKind parse_gate_kind(const std::string& name);

// The capacity loss L_cap (METHOD.md §3): per (layer, head) budget M, or one global budget M·L·H.
enum class CapacityMode { PerHead, Global };
const char* capacity_mode_name(CapacityMode mode);  // "per-head" | "global"
CapacityMode parse_capacity_mode(const std::string& name);
// METHOD.md: TrimKV trains with a per-head budget, DBTrimKV with the global one.
CapacityMode default_capacity_mode(GateKind kind);

}  // namespace trimkv
