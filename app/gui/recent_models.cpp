#include "recent_models.h"

#include <QDir>
#include <QSettings>

namespace RecentModels {

namespace {
const QString kKey = QStringLiteral("models/recent");

QString normalized(const QString& dir) { return QDir::cleanPath(QDir(dir).absolutePath()); }
}  // namespace

QStringList withItem(QStringList list, const QString& item, int max) {
  const QString key = normalized(item);
  list.removeIf([&](const QString& s) { return normalized(s) == key; });
  list.prepend(key);
  while (list.size() > max) list.removeLast();
  return list;
}

QStringList load() { return QSettings().value(kKey).toStringList(); }

void add(const QString& dir) { QSettings().setValue(kKey, withItem(load(), dir)); }

void clear() { QSettings().remove(kKey); }

}  // namespace RecentModels
