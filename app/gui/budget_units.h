// The budget in the units the toolbar offers. A budget is M KV entries per layer and KV head
// (DESIGN.md "Budgets and units"); the same M reads as bytes (M entries in each of the L·H_kv
// heads, each entry one token's K and V) or as a share of the conversation so far (M over the
// tokens in the context: 100% keeps everything). Every conversion goes through
// unitsPerEntry(), so the slider, the spin box and the hints always agree.
#pragma once
#include <cstdint>

#include <QString>

namespace trimkv {
struct ModelInfo;
struct KvSnapshot;
}  // namespace trimkv

enum class BudgetUnit { EntriesPerHead, MiB, PercentOfContext };

struct BudgetScale {
  int64_t heads = 0;          // L · H_kv
  double bytesPerEntry = 0;   // K and V of one entry in one head
  int64_t contextTokens = 0;  // tokens of the conversation so far

  // From the model's description, refined by a snapshot of the cache when one holds entries
  // (its bytes per entry are those of the storage dtype actually in use). kv may be null.
  static BudgetScale of(const trimkv::ModelInfo& info, const trimkv::KvSnapshot* kv);
};

// What one entry per head amounts to in `unit` (0 when the unit cannot be used: no model, or no
// context yet for a percentage).
double unitsPerEntry(BudgetUnit unit, const BudgetScale& scale);
bool unitAvailable(BudgetUnit unit, const BudgetScale& scale);
// Entries per head -> the unit, and back (rounded to the nearest entry, at least 1). An
// unavailable unit converts as entries.
double budgetInUnit(int64_t entriesPerHead, BudgetUnit unit, const BudgetScale& scale);
int64_t entriesFromUnit(double value, BudgetUnit unit, const BudgetScale& scale);
// "512 entries/head", "12.0 MiB", "25%": a budget for reading, in `unit`.
QString budgetText(int64_t entriesPerHead, BudgetUnit unit, const BudgetScale& scale);
