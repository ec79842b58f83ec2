#include "conversation_list.h"

#include <QDateTime>
#include <QFileInfo>
#include <QLabel>
#include <QListWidget>
#include <QSettings>
#include <QVBoxLayout>

#include "recent_models.h"

namespace {
const QString kKey = QStringLiteral("conversations/recent");
constexpr int kPathRole = Qt::UserRole + 1;
}  // namespace

ConversationList::ConversationList(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("conversationList"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  m_list = new QListWidget(this);
  m_list->setToolTip(tr("Saved conversations: click one to open it (it is replayed under the current policy and "
                        "budget)"));
  layout->addWidget(m_list, 1);
  connect(m_list, &QListWidget::itemClicked, this, [this](QListWidgetItem* item) {
    const QString path = item->data(kPathRole).toString();
    if (!path.isEmpty()) Q_EMIT openRequested(path);
  });
  refresh();
}

void ConversationList::setAutosaveFile(const QString& path) {
  m_autosave = path;
  refresh();
}

QStringList ConversationList::recentFiles() { return QSettings().value(kKey).toStringList(); }

void ConversationList::addRecent(const QString& path) {
  if (path.isEmpty() || QFileInfo(path) == QFileInfo(m_autosave)) {
    refresh();
    return;
  }
  QSettings().setValue(kKey, RecentModels::withItem(recentFiles(), path, kMax));
  refresh();
}

QString ConversationList::pathAt(int row) const {
  const QListWidgetItem* item = m_list->item(row);
  return item ? item->data(kPathRole).toString() : QString();
}

void ConversationList::refresh() {
  m_list->clear();
  auto add = [this](const QString& path, const QString& label) {
    const QFileInfo info(path);
    auto* item = new QListWidgetItem(
        QStringLiteral("%1\n%2").arg(label, QLocale().toString(info.lastModified(), QLocale::ShortFormat)), m_list);
    item->setData(kPathRole, info.absoluteFilePath());
    item->setToolTip(info.absoluteFilePath());
  };
  if (!m_autosave.isEmpty() && QFileInfo::exists(m_autosave)) add(m_autosave, tr("Last conversation (autosaved)"));
  for (const QString& path : recentFiles())
    if (QFileInfo::exists(path) && QFileInfo(path) != QFileInfo(m_autosave)) add(path, QFileInfo(path).completeBaseName());
  if (m_list->count() == 0) {
    auto* none = new QListWidgetItem(tr("(no saved conversation yet)"), m_list);
    none->setFlags(Qt::NoItemFlags);
  }
}
