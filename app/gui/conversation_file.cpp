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
  QFile file(path);
  TRIMKV_CHECK(file.open(QIODevice::ReadOnly), Io, "cannot read '", path.toStdString(), "'");
  QJsonParseError err;
  const QJsonDocument doc = QJsonDocument::fromJson(file.readAll(), &err);
  const std::string name = path.toStdString();
  TRIMKV_CHECK(!doc.isNull(), Format, name, ": not JSON (", err.errorString().toStdString(), " at offset ",
               err.offset, ")");
  TRIMKV_CHECK(doc.isObject() && doc.object().value("messages").isArray(), Format, name,
               ": expected an object with a \"messages\" array");
  const QDir dir = QFileInfo(path).absoluteDir();
  std::vector<trimkv::Message> messages;
  const QJsonArray array = doc.object().value("messages").toArray();
  for (qsizetype i = 0; i < array.size(); ++i) {
    const QJsonObject m = array[i].toObject();
    const QString role = m.value("role").toString();
    TRIMKV_CHECK(role == "user" || role == "assistant" || (role == "system" && i == 0), Format, name,
                 ": messages[", i, "].role must be \"user\" or \"assistant\" (or \"system\" for the first), not \"",
                 role.toStdString(), "\"");
    TRIMKV_CHECK(m.value("content").isArray(), Format, name, ": messages[", i, "].content must be an array");
    trimkv::Message msg;
    msg.role = role.toStdString();
    const QJsonArray content = m.value("content").toArray();
    for (qsizetype k = 0; k < content.size(); ++k) {
      const QJsonObject part = content[k].toObject();
      const QString type = part.value("type").toString();
      if (type == "text") {
        msg.content.push_back(trimkv::ContentPart::text_part(part.value("text").toString().toStdString()));
      } else if (type == "image") {
        const QString p = part.value("path").toString();
        TRIMKV_CHECK(!p.isEmpty(), Format, name, ": messages[", i, "].content[", k, "].path is missing");
        msg.content.push_back(trimkv::ContentPart::image_part(QDir::cleanPath(dir.absoluteFilePath(p)).toStdString()));
      } else {
        TRIMKV_FAIL(Format, name, ": messages[", i, "].content[", k, "].type must be \"text\" or \"image\", not \"",
                    type.toStdString(), "\"");
      }
    }
    messages.push_back(std::move(msg));
  }
  return messages;
}
