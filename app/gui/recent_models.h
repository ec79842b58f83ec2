// The model folders opened lately (File > Open Recent), newest first, at most kMax, kept in
// QSettings ("models/recent"). A folder is listed once it loaded successfully.
#pragma once
#include <QString>
#include <QStringList>

namespace RecentModels {

inline constexpr int kMax = 8;

// `list` with `item` moved (or added) to the front, duplicates (same absolute path) dropped and
// cut to `max` entries.
QStringList withItem(QStringList list, const QString& item, int max = kMax);

QStringList load();
void add(const QString& dir);
void clear();

}  // namespace RecentModels
