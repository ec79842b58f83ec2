#include "policy_options_form.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QSpinBox>
#include <algorithm>
#include <climits>
#include <cmath>

namespace {
using Kind = trimkv::PolicyOptionInfo::Kind;
const QString kAuto = QStringLiteral("auto");

int clampToInt(double v) { return static_cast<int>(std::clamp(v, static_cast<double>(INT_MIN), static_cast<double>(INT_MAX))); }

// Decimals that show the smallest allowed value of a number option (at most 6).
int decimalsFor(const trimkv::PolicyOptionInfo& o) {
  if (o.min > 0 && o.min < 1e-3) return 6;
  return 3;
}
}  // namespace

PolicyOptionsForm::PolicyOptionsForm(QWidget* parent) : QWidget(parent) {
  m_form = new QFormLayout(this);
  m_empty = new QLabel(tr("This policy has no options."), this);
  m_form->addRow(m_empty);
}

void PolicyOptionsForm::setPolicy(const trimkv::PolicyDescription& policy) {
  while (m_form->rowCount() > 0) m_form->removeRow(0);  // deletes the row widgets
  m_rows.clear();
  m_policy = policy.name;
  m_empty = nullptr;
  if (policy.option_infos.empty()) {
    m_empty = new QLabel(tr("%1 has no options.").arg(QString::fromStdString(policy.name)), this);
    m_form->addRow(m_empty);
  }
  for (const trimkv::PolicyOptionInfo& o : policy.option_infos) {
    Row row;
    row.info = o;
    const QString help = QString::fromStdString(o.help);
    auto* cell = new QWidget(this);
    auto* h = new QHBoxLayout(cell);
    h->setContentsMargins(0, 0, 0, 0);
    if (o.kind == Kind::Choice) {
      auto* combo = new QComboBox(cell);
      for (const std::string& c : o.choices) combo->addItem(QString::fromStdString(c));
      connect(combo, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
        if (!m_quiet) Q_EMIT optionsEdited();
      });
      row.editor = combo;
    } else if (o.kind == Kind::Int) {
      auto* spin = new QSpinBox(cell);
      spin->setRange(clampToInt(o.min), clampToInt(o.max));
      spin->setKeyboardTracking(false);
      connect(spin, qOverload<int>(&QSpinBox::valueChanged), this, [this] {
        if (!m_quiet) Q_EMIT optionsEdited();
      });
      row.editor = spin;
    } else {
      auto* spin = new QDoubleSpinBox(cell);
      spin->setDecimals(decimalsFor(o));
      spin->setRange(o.min, o.max);
      spin->setSingleStep(std::max(std::pow(10.0, -spin->decimals()), (o.max - o.min) / 100.0));
      spin->setKeyboardTracking(false);
      connect(spin, qOverload<double>(&QDoubleSpinBox::valueChanged), this, [this] {
        if (!m_quiet) Q_EMIT optionsEdited();
      });
      row.editor = spin;
    }
    row.editor->setObjectName(QString::fromStdString(o.name));
    row.editor->setToolTip(help);
    h->addWidget(row.editor, 1);
    if (o.default_value == "auto") {
      row.autoBox = new QCheckBox(tr("auto"), cell);
      row.autoBox->setToolTip(tr("Derived from the budget: %1").arg(help));
      connect(row.autoBox, &QCheckBox::toggled, this, [this, editor = row.editor](bool on) {
        editor->setEnabled(!on);
        if (!m_quiet) Q_EMIT optionsEdited();
      });
      h->addWidget(row.autoBox);
    }
    auto* label = new QLabel(QString::fromStdString(o.name), this);
    label->setToolTip(help);
    m_form->addRow(label, cell);
    m_rows.push_back(row);
  }
  setOptions({});
}

void PolicyOptionsForm::setValue(Row& row, const QString& value) {
  const bool isAuto = value == kAuto;
  if (row.autoBox) {
    row.autoBox->setChecked(isAuto);
    row.editor->setEnabled(!isAuto);
  }
  if (isAuto) return;
  if (auto* combo = qobject_cast<QComboBox*>(row.editor)) combo->setCurrentText(value);
  else if (auto* spin = qobject_cast<QSpinBox*>(row.editor)) spin->setValue(value.toInt());
  else if (auto* dspin = qobject_cast<QDoubleSpinBox*>(row.editor)) dspin->setValue(value.toDouble());
}

QString PolicyOptionsForm::valueOf(const Row& row) const {
  if (row.autoBox && row.autoBox->isChecked()) return kAuto;
  if (auto* combo = qobject_cast<QComboBox*>(row.editor)) return combo->currentText();
  if (auto* spin = qobject_cast<QSpinBox*>(row.editor)) return QString::number(spin->value());
  if (auto* dspin = qobject_cast<QDoubleSpinBox*>(row.editor)) return QString::number(dspin->value(), 'g', 10);
  return {};
}

void PolicyOptionsForm::setOptions(const std::vector<std::string>& items) {
  m_quiet = true;
  for (Row& row : m_rows) {
    QString value = QString::fromStdString(row.info.default_value);
    for (const std::string& item : items) {
      const size_t eq = item.find('=');
      if (eq != std::string::npos && item.substr(0, eq) == row.info.name)
        value = QString::fromStdString(item.substr(eq + 1));
    }
    setValue(row, value);
  }
  m_quiet = false;
}

std::vector<std::string> PolicyOptionsForm::options() const {
  std::vector<std::string> items;
  for (const Row& row : m_rows) {
    const QString value = valueOf(row);
    const QString def = QString::fromStdString(row.info.default_value);
    bool same = value == def;
    if (!same && row.info.kind != Kind::Choice && value != kAuto && def != kAuto)
      same = std::abs(value.toDouble() - def.toDouble()) <= 1e-12 * std::max(1.0, std::abs(def.toDouble()));
    if (!same) items.push_back(row.info.name + "=" + value.toStdString());
  }
  return items;
}

QStringList PolicyOptionsForm::optionNames() const {
  QStringList names;
  for (const Row& row : m_rows) names << QString::fromStdString(row.info.name);
  return names;
}

QWidget* PolicyOptionsForm::editor(const QString& name) const {
  for (const Row& row : m_rows)
    if (QString::fromStdString(row.info.name) == name) return row.editor;
  return nullptr;
}
