#include "budget_control.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSignalBlocker>
#include <QSlider>
#include <QStandardItemModel>
#include <algorithm>
#include <cmath>

BudgetControl::BudgetControl(QWidget* parent) : QWidget(parent) {
  auto* row = new QHBoxLayout(this);
  row->setContentsMargins(0, 0, 0, 0);
  m_slider = new QSlider(Qt::Horizontal, this);
  m_slider->setRange(0, kSliderSteps);
  m_slider->setMinimumWidth(120);
  m_slider->setMaximumWidth(240);
  m_slider->setToolTip(tr("The budget, from 1 entry per head to the model's whole context (logarithmic)"));
  m_spin = new QDoubleSpinBox(this);
  m_spin->setKeyboardTracking(false);  // a value counts once typed in (Enter or focus out)
  m_spin->setMinimumWidth(90);
  m_spin->setSizePolicy(QSizePolicy::Fixed, QSizePolicy::Fixed);
  m_unit = new QComboBox(this);
  m_unit->addItem(tr("entries/head"), static_cast<int>(BudgetUnit::EntriesPerHead));
  m_unit->addItem(tr("MiB"), static_cast<int>(BudgetUnit::MiB));
  m_unit->addItem(tr("% of context"), static_cast<int>(BudgetUnit::PercentOfContext));
  m_unit->setItemData(0, tr("KV entries kept per layer and KV head (an entry is one token's K and V in one head)"),
                      Qt::ToolTipRole);
  m_unit->setItemData(1, tr("K and V memory of the whole cache at this budget (entries per head × layers × KV heads "
                            "× bytes per entry)"),
                      Qt::ToolTipRole);
  m_unit->setItemData(2, tr("Entries per head as a share of the conversation's tokens so far (100% keeps "
                            "everything); the share falls as the conversation grows"),
                      Qt::ToolTipRole);
  m_unit->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  m_unit->setSizePolicy(QSizePolicy::Fixed, QSizePolicy::Fixed);
  m_hint = new QLabel(this);
  row->addWidget(m_slider);
  row->addWidget(m_spin);
  row->addWidget(m_unit);
  row->addWidget(m_hint);
  setToolTip(tr("Entries kept per layer and KV head. The cache compresses when it exceeds the budget plus a "
                "small slack, so a head may briefly hold a few more. A change applies from the next turn."));

  connect(m_unit, qOverload<int>(&QComboBox::currentIndexChanged), this, [this](int) { showEntries(); });
  connect(m_spin, qOverload<double>(&QDoubleSpinBox::valueChanged), this, &BudgetControl::onSpinEdited);
  connect(m_slider, &QSlider::valueChanged, this, &BudgetControl::onSliderMoved);
  setScale(BudgetScale{}, m_maxEntries);
}

BudgetUnit BudgetControl::unit() const { return static_cast<BudgetUnit>(m_unit->currentData().toInt()); }

void BudgetControl::setUnit(BudgetUnit unit) {
  const int idx = m_unit->findData(static_cast<int>(unit));
  if (idx >= 0 && unitAvailable(unit, m_scale)) m_unit->setCurrentIndex(idx);
}

void BudgetControl::setEntriesPerHead(int64_t entries) {
  m_entries = std::max<int64_t>(1, entries);
  showEntries();
}

void BudgetControl::setScale(const BudgetScale& scale, int64_t maxEntries) {
  m_scale = scale;
  m_maxEntries = std::max<int64_t>(2, maxEntries);
  // Units without a basis (no context yet for %) cannot be chosen; one in use falls back.
  auto* items = qobject_cast<QStandardItemModel*>(m_unit->model());
  for (int i = 0; i < m_unit->count(); ++i) {
    const bool ok = unitAvailable(static_cast<BudgetUnit>(m_unit->itemData(i).toInt()), scale);
    if (items) items->item(i)->setEnabled(ok);
  }
  if (!unitAvailable(unit(), scale)) {
    const QSignalBlocker block(m_unit);
    m_unit->setCurrentIndex(0);
  }
  showEntries();
}

void BudgetControl::setInactiveText(const QString& text) {
  m_inactive = text;
  m_slider->setEnabled(text.isEmpty());
  m_spin->setEnabled(text.isEmpty());
  m_unit->setEnabled(text.isEmpty());
  showEntries();
}

QString BudgetControl::hintText() const { return m_hint->text(); }

void BudgetControl::showEntries() {
  const BudgetUnit u = unit();
  const double perEntry = unitsPerEntry(u, m_scale);
  {
    const QSignalBlocker b1(m_spin), b2(m_slider);
    switch (u) {
      case BudgetUnit::EntriesPerHead: m_spin->setDecimals(0); break;
      case BudgetUnit::MiB: m_spin->setDecimals(perEntry < 0.01 ? 4 : 2); break;
      case BudgetUnit::PercentOfContext: m_spin->setDecimals(1); break;
    }
    // The spin box spans 1 entry .. the context, in the unit; one step is about one entry (at
    // least one displayed digit).
    const double lo = budgetInUnit(1, u, m_scale), hi = budgetInUnit(std::max(m_maxEntries, m_entries), u, m_scale);
    m_spin->setRange(lo, hi);
    m_spin->setSingleStep(std::max(perEntry > 0 ? perEntry : 1.0, std::pow(10.0, -m_spin->decimals())));
    m_spin->setValue(budgetInUnit(m_entries, u, m_scale));
    m_slider->setValue(sliderPosition(m_entries));
  }
  if (!m_inactive.isEmpty()) {
    m_hint->setText(m_inactive);
    return;
  }
  // The other units, for reading.
  QStringList others;
  for (BudgetUnit o : {BudgetUnit::EntriesPerHead, BudgetUnit::MiB, BudgetUnit::PercentOfContext})
    if (o != u && unitAvailable(o, m_scale)) others << budgetText(m_entries, o, m_scale);
  m_hint->setText(others.isEmpty() ? QString() : QStringLiteral("= ") + others.join(QStringLiteral(" · ")));
}

void BudgetControl::onSpinEdited(double value) {
  const int64_t entries = entriesFromUnit(value, unit(), m_scale);
  m_entries = entries;
  showEntries();  // snaps the spin box to the whole number of entries
  Q_EMIT budgetEdited(m_entries);
}

void BudgetControl::onSliderMoved(int position) {
  m_entries = entriesAt(position);
  showEntries();
  Q_EMIT budgetEdited(m_entries);
}

int BudgetControl::sliderPosition(int64_t entries) const {
  const double t = std::log(static_cast<double>(std::clamp<int64_t>(entries, 1, m_maxEntries))) /
                   std::log(static_cast<double>(m_maxEntries));
  return static_cast<int>(std::lround(t * kSliderSteps));
}

int64_t BudgetControl::entriesAt(int position) const {
  const double t = static_cast<double>(position) / kSliderSteps;
  return std::max<int64_t>(1, std::llround(std::exp(t * std::log(static_cast<double>(m_maxEntries)))));
}
