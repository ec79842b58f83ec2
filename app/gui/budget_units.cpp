#include "budget_units.h"

#include <QLocale>
#include <QObject>
#include <algorithm>
#include <cmath>

#include "trimkv/core/engine.h"
#include "trimkv/core/snapshot.h"

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
}

BudgetScale BudgetScale::of(const trimkv::ModelInfo& info, const trimkv::KvSnapshot* kv) {
  BudgetScale s;
  s.heads = info.n_layer * info.n_kv_head;
  if (s.heads > 0) s.bytesPerEntry = static_cast<double>(info.kv_bytes_per_token) / static_cast<double>(s.heads);
  if (kv) {
    if (kv->total_entries > 0 && kv->bytes_held > 0)
      s.bytesPerEntry = static_cast<double>(kv->bytes_held) / static_cast<double>(kv->total_entries);
    s.contextTokens = kv->n_tokens;
  }
  return s;
}

double unitsPerEntry(BudgetUnit unit, const BudgetScale& scale) {
  switch (unit) {
    case BudgetUnit::EntriesPerHead: return 1.0;
    case BudgetUnit::MiB: return static_cast<double>(scale.heads) * scale.bytesPerEntry / kMiB;
    case BudgetUnit::PercentOfContext:
      return scale.contextTokens > 0 ? 100.0 / static_cast<double>(scale.contextTokens) : 0.0;
  }
  return 0.0;
}

bool unitAvailable(BudgetUnit unit, const BudgetScale& scale) { return unitsPerEntry(unit, scale) > 0.0; }

double budgetInUnit(int64_t entriesPerHead, BudgetUnit unit, const BudgetScale& scale) {
  const double f = unitsPerEntry(unit, scale);
  return static_cast<double>(entriesPerHead) * (f > 0.0 ? f : 1.0);
}

int64_t entriesFromUnit(double value, BudgetUnit unit, const BudgetScale& scale) {
  const double f = unitsPerEntry(unit, scale);
  const double entries = value / (f > 0.0 ? f : 1.0);
  if (!std::isfinite(entries)) return 1;
  return std::max<int64_t>(1, static_cast<int64_t>(std::llround(std::min(entries, 9.0e15))));
}

QString budgetText(int64_t entriesPerHead, BudgetUnit unit, const BudgetScale& scale) {
  if (!unitAvailable(unit, scale)) unit = BudgetUnit::EntriesPerHead;
  const double v = budgetInUnit(entriesPerHead, unit, scale);
  switch (unit) {
    case BudgetUnit::EntriesPerHead:
      return QObject::tr("%1 entries/head").arg(QLocale(QLocale::English).toString(static_cast<qlonglong>(entriesPerHead)));
    case BudgetUnit::MiB:
      return v < 1.0 ? QStringLiteral("%1 KiB").arg(v * 1024.0, 0, 'f', 1) : QStringLiteral("%1 MiB").arg(v, 0, 'f', 1);
    case BudgetUnit::PercentOfContext:
      return QObject::tr("%1% of the context").arg(v, 0, 'f', v < 10.0 ? 1 : 0);
  }
  return {};
}
