#include "conversation_file.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QCryptographicHash>
#include <QRegularExpression>
#include <QSet>

#include "atomic_file.h"

#include "trimkv/core/error.h"

namespace {
constexpr const char* kFormat = "trimkv-conversation";
constexpr int kVersion = 1;
constexpr int kHashChars = 16;  // of SHA-1, in hex: 64 bits, no collision among one chat's images

// "<hash>-<name>": the image's content names its copy, so saving again (or saving a
// conversation that was opened from this very folder) finds it there and copies nothing, and a
// copy never overwrites a file a previous save still refers to. A name already carrying a hash
// prefix keeps just one.
QString copyName(const QByteArray& hash, const QString& fileName) {
  static const QRegularExpression hashed(QStringLiteral("^[0-9a-f]{%1}-").arg(kHashChars));
  QString base = fileName;
  base.remove(hashed);
  return QString::fromLatin1(hash) + QLatin1Char('-') + base;
}

QByteArray contentHash(const QString& path) {
  QFile file(path);
  TRIMKV_CHECK(file.open(QIODevice::ReadOnly), Io, "cannot read the image '", path.toStdString(), "'");
  QCryptographicHash hash(QCryptographicHash::Sha1);
  TRIMKV_CHECK(hash.addData(&file), Io, "cannot read the image '", path.toStdString(), "'");
  return hash.result().toHex().left(kHashChars);
}
}  // namespace

void saveConversationFile(const QString& path, const std::vector<trimkv::Message>& messages,
                          const QString& modelDir) {
  const QFileInfo info(path);
  const QString imagesName = info.completeBaseName() + QStringLiteral("-images");
  QDir dir = info.absoluteDir();
  QSet<QString> written;  // file names in imagesName the new JSON refers to
  QJsonArray jsonMessages;
  for (const trimkv::Message& m : messages) {
    QJsonArray content;
    for (const trimkv::ContentPart& p : m.content) {
      if (p.kind == trimkv::ContentPart::Kind::Text) {
        content.append(QJsonObject{{"type", "text"}, {"text", QString::fromStdString(p.text)}});
        continue;
      }
      const QString source = QString::fromStdString(p.path);
      TRIMKV_CHECK(dir.mkpath(imagesName), Io, "cannot create the folder '",
                   dir.filePath(imagesName).toStdString(), "'");
      const QString name = copyName(contentHash(source), QFileInfo(source).fileName());
      const QString relative = imagesName + QLatin1Char('/') + name;
      const QString target = dir.filePath(relative);
      // Same name, same content: already there (possibly the source itself).
      if (!QFileInfo::exists(target)) {
        const QString partial = target + QStringLiteral(".part");
        QFile::remove(partial);
        TRIMKV_CHECK(QFile::copy(source, partial) && QFile::rename(partial, target), Io, "cannot copy the image '",
                     source.toStdString(), "' to '", target.toStdString(), "'");
      }
      written.insert(name);
      content.append(QJsonObject{{"type", "image"}, {"path", relative}});
    }
    jsonMessages.append(QJsonObject{{"role", QString::fromStdString(m.role)}, {"content", content}});
  }
  const QJsonObject root{{"format", kFormat}, {"version", kVersion}, {"model", modelDir}, {"messages", jsonMessages}};
  // The images are in place before the JSON that names them replaces the old one.
  writeFileAtomically(path, QJsonDocument(root).toJson(QJsonDocument::Indented));
  // Copies no longer referred to (earlier saves to this name) go; only files named as ours.
  static const QRegularExpression ours(QStringLiteral("^[0-9a-f]{%1}-").arg(kHashChars));
  const QDir images(dir.filePath(imagesName));
  if (images.exists())
    for (const QString& f : images.entryList(QDir::Files))
      if (ours.match(f).hasMatch() && !written.contains(f)) QFile::remove(images.filePath(f));
}

std::vector<trimkv::Message> loadConversationFile(const QString& path) {
  // The messages as `trimkv generate --messages` reads them (one reader: core's), then the
  // app's rule on roles: a system message may only open the conversation.
  const std::string name = path.toStdString();
  std::vector<trimkv::Message> messages = trimkv::read_messages_file(name);
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    TRIMKV_CHECK(role == "user" || role == "assistant" || (role == "system" && i == 0), Format, name,
                 ": messages[", i, "].role must be \"user\" or \"assistant\" (or \"system\" for the first), not \"",
                 role, "\"");
  }
  return messages;
}
