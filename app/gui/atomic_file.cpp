#include "atomic_file.h"

#include <QSaveFile>

#include "trimkv/core/error.h"

void writeFileAtomically(const QString& path, const QByteArray& bytes) {
  QSaveFile file(path);
  TRIMKV_CHECK(file.open(QIODevice::WriteOnly), Io, "cannot write '", path.toStdString(), "': ",
               file.errorString().toStdString());
  TRIMKV_CHECK(file.write(bytes) == bytes.size(), Io, "cannot write '", path.toStdString(), "': ",
               file.errorString().toStdString());
  TRIMKV_CHECK(file.commit(), Io, "cannot write '", path.toStdString(), "': ", file.errorString().toStdString());
}
