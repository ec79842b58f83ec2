// Writes a whole file so that a crash or a full disk never leaves it half-written: the bytes go
// to a temporary file beside it, which then replaces it in one rename (QSaveFile). Readers see
// the old file or the new one, never a mix.
#pragma once
#include <QByteArray>
#include <QString>

// Error{Io} naming the file when it cannot be written.
void writeFileAtomically(const QString& path, const QByteArray& bytes);
