// File > Open a model…: the models this machine holds, in one list: the built-in demo model, the
// supported checkpoints found in the Hugging Face cache (repo id, family, size on disk; nothing
// is downloaded) and the recent folders. Unsupported or broken cache entries are listed greyed
// with the reason. Choosing one emits modelChosen(folder).
#pragma once
#include <QDialog>
#include <QString>
#include <vector>

class QTreeWidget;
class QTreeWidgetItem;
class QPushButton;

struct ModelChoice {
  enum class Source { BuiltIn, Cache, Recent };
  Source source = Source::Recent;
  QString name;     // repo id, "Built-in demo model", or the folder's name
  QString family;   // the family that runs it ("" when none)
  QString dir;      // what opening it loads ("" when it cannot be opened)
  qint64 bytes = -1;  // on disk (-1: not measured)
  QString problem;  // why it cannot be opened ("" when it can)
};

// What the picker lists (in its order): built-in, then the cache, then recent folders.
std::vector<ModelChoice> listModelChoices();

class ModelPicker : public QDialog {
  Q_OBJECT

 public:
  explicit ModelPicker(QWidget* parent = nullptr);
  const std::vector<ModelChoice>& choices() const { return m_choices; }
  // Selects choice `index` (of choices()) and accepts, as a double-click does; false when it
  // cannot be opened.
  bool choose(int index);

 Q_SIGNALS:
  void modelChosen(const QString& dir);

 private:
  void fill();
  int indexOf(const QTreeWidgetItem* item) const;

  std::vector<ModelChoice> m_choices;
  QTreeWidget* m_tree = nullptr;
  QPushButton* m_open = nullptr;
};
