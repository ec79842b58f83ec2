// The options of the chosen eviction policy, built from its registry table (PolicyOptionInfo,
// eviction_settings.h): one row per option the policy accepts (lookahead, floor, window,
// sinks, ...), a spin box for numbers (with an "auto" box when the default is derived from the
// budget) or a list for choices, each with the table's help as tooltip. options() gives the
// "key=value" items that differ from the defaults, as EvictionSettings::options takes them.
#pragma once
#include <QWidget>
#include <string>
#include <vector>

#include "trimkv/core/eviction_settings.h"

class QCheckBox;
class QFormLayout;
class QLabel;

class PolicyOptionsForm : public QWidget {
  Q_OBJECT

 public:
  explicit PolicyOptionsForm(QWidget* parent = nullptr);

  // Rebuilds the form for `policy` (all rows at their defaults).
  void setPolicy(const trimkv::PolicyDescription& policy);
  const std::string& policy() const { return m_policy; }
  // Shows `items` ("key=value"; keys not given: their defaults). No optionsEdited.
  void setOptions(const std::vector<std::string>& items);
  std::vector<std::string> options() const;
  QStringList optionNames() const;  // the rows shown, in table order
  // The editor of option `name` (a QSpinBox, QDoubleSpinBox or QComboBox), or null.
  QWidget* editor(const QString& name) const;

 Q_SIGNALS:
  void optionsEdited();

 private:
  struct Row {
    trimkv::PolicyOptionInfo info;
    QWidget* editor = nullptr;
    QCheckBox* autoBox = nullptr;  // options whose default is "auto"
  };
  QString valueOf(const Row& row) const;
  void setValue(Row& row, const QString& value);

  QFormLayout* m_form = nullptr;
  QLabel* m_empty = nullptr;
  std::string m_policy;
  std::vector<Row> m_rows;
  bool m_quiet = false;  // setting values from code
};
