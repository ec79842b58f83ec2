#include "model_picker.h"

#include <QDialogButtonBox>
#include <QDir>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QLocale>
#include <QPushButton>
#include <QTreeWidget>
#include <QVBoxLayout>

#include "recent_models.h"
#include "trimkv/core/default_model.h"
#include "trimkv/core/hf_cache.h"
#include "trimkv/core/model_config.h"
#include "trimkv/vision/chat_engine.h"

namespace {

// The family that runs `model_type` ("" with the reason in `problem` when none does).
QString familyOf(const std::string& model_type, QString& problem) {
  if (model_type.empty()) {
    problem = QObject::tr("no readable config.json with a model_type (or not a GGUF file of a supported architecture)");
    return {};
  }
  const QString family = QString::fromStdString(trimkv::vision::ChatEngine::family_for_model_type(model_type));
  if (family.isEmpty()) problem = QObject::tr("model_type '%1' is not supported").arg(QString::fromStdString(model_type));
  return family;
}

QString familyOfFolder(const QString& dir, QString& problem) {
  return familyOf(trimkv::checkpoint_model_type(dir.toStdString()), problem);
}

QString sizeText(qint64 bytes) {
  return bytes < 0 ? QString() : QLocale().formattedDataSize(bytes, 1, QLocale::DataSizeTraditionalFormat);
}

}  // namespace

std::vector<ModelChoice> listModelChoices() {
  std::vector<ModelChoice> out;
  try {
    ModelChoice c;
    c.source = ModelChoice::Source::BuiltIn;
    c.name = QObject::tr("Built-in demo model");
    c.dir = QString::fromStdString(trimkv::default_model_dir());
    c.family = familyOfFolder(c.dir, c.problem);
    out.push_back(c);
  } catch (const std::exception&) {
    // No embedded model in this build: the rest is still listed.
  }
  for (const trimkv::CachedRepo& r : trimkv::list_cached_repos()) {
    ModelChoice c;
    c.source = ModelChoice::Source::Cache;
    c.name = QString::fromStdString(r.repo_id);
    c.dir = QString::fromStdString(r.dir);
    c.bytes = r.dir.empty() ? -1 : static_cast<qint64>(r.bytes);
    c.problem = QString::fromStdString(r.problem);
    if (c.problem.isEmpty()) c.family = familyOf(r.model_type, c.problem);
    out.push_back(c);
  }
  for (const QString& dir : RecentModels::load()) {
    ModelChoice c;
    c.source = ModelChoice::Source::Recent;
    c.name = QFileInfo(dir).fileName();
    c.dir = dir;
    if (QFileInfo(dir).isDir() || QFileInfo(dir).isFile()) c.family = familyOfFolder(dir, c.problem);  // folder or GGUF
    else c.problem = QObject::tr("the folder or file is gone");
    out.push_back(c);
  }
  return out;
}

ModelPicker::ModelPicker(QWidget* parent) : QDialog(parent) {
  setObjectName(QStringLiteral("modelPicker"));
  setWindowTitle(tr("Open a model"));
  auto* layout = new QVBoxLayout(this);
  auto* intro = new QLabel(tr("Models on this machine. The Hugging Face cache is <code>%1</code> "
                              "($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub); nothing is downloaded.")
                               .arg(QDir::toNativeSeparators(QString::fromStdString(trimkv::hf_hub_cache_dir()))),
                           this);
  intro->setWordWrap(true);
  layout->addWidget(intro);
  m_tree = new QTreeWidget(this);
  m_tree->setObjectName(QStringLiteral("modelTree"));
  m_tree->setColumnCount(4);
  m_tree->setHeaderLabels({tr("Model"), tr("Family"), tr("Size"), tr("Folder")});
  m_tree->setRootIsDecorated(true);
  m_tree->header()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  layout->addWidget(m_tree, 1);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Cancel, this);
  m_open = buttons->addButton(tr("Open"), QDialogButtonBox::AcceptRole);
  m_open->setEnabled(false);
  layout->addWidget(buttons);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(m_open, &QPushButton::clicked, this, [this] { choose(indexOf(m_tree->currentItem())); });
  connect(m_tree, &QTreeWidget::itemDoubleClicked, this, [this](QTreeWidgetItem* item) { choose(indexOf(item)); });
  connect(m_tree, &QTreeWidget::currentItemChanged, this, [this](QTreeWidgetItem* item) {
    const int i = indexOf(item);
    m_open->setEnabled(i >= 0 && m_choices[static_cast<size_t>(i)].problem.isEmpty());
  });
  resize(820, 420);
  fill();
}

void ModelPicker::fill() {
  m_choices = listModelChoices();
  m_tree->clear();
  const QString titles[] = {tr("Built in"), tr("Hugging Face cache"), tr("Recent folders")};
  QTreeWidgetItem* groups[3] = {};
  for (size_t i = 0; i < m_choices.size(); ++i) {
    const ModelChoice& c = m_choices[i];
    const int g = static_cast<int>(c.source);
    if (!groups[g]) {
      groups[g] = new QTreeWidgetItem(m_tree, {titles[g]});
      groups[g]->setFlags(Qt::ItemIsEnabled);
      groups[g]->setExpanded(true);
    }
    auto* item = new QTreeWidgetItem(groups[g], {c.name, c.family, sizeText(c.bytes), QDir::toNativeSeparators(c.dir)});
    item->setData(0, Qt::UserRole, static_cast<int>(i));
    if (!c.problem.isEmpty()) {
      item->setFlags(Qt::ItemIsEnabled);  // listed, not openable
      item->setText(1, tr("cannot open"));
      for (int col = 0; col < 4; ++col) item->setForeground(col, palette().color(QPalette::Disabled, QPalette::Text));
      item->setToolTip(0, c.problem);
      item->setToolTip(1, c.problem);
    } else {
      item->setToolTip(3, c.dir);
    }
  }
  if (m_choices.empty()) new QTreeWidgetItem(m_tree, {tr("No models found: use File > Open model folder… or Open a GGUF file…")});
}

int ModelPicker::indexOf(const QTreeWidgetItem* item) const {
  if (!item) return -1;
  const QVariant v = item->data(0, Qt::UserRole);
  return v.isValid() ? v.toInt() : -1;
}

bool ModelPicker::choose(int index) {
  if (index < 0 || index >= static_cast<int>(m_choices.size()) || !m_choices[static_cast<size_t>(index)].problem.isEmpty())
    return false;
  Q_EMIT modelChosen(m_choices[static_cast<size_t>(index)].dir);
  accept();
  return true;
}
