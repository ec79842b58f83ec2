// The built-in sample conversation of the app (first start, --screenshot): one user turn from the
// synthetic shapes world (vision/world.h) whose image is rendered into a folder of the caller's.
// Needs nothing from the source tree, so the installed app has it too.
#pragma once
#include <QString>
#include <QStringList>

struct SampleTurn {
  QString text;        // with the <image> placeholder where the image goes
  QStringList images;  // PNG files written into the folder given
};

// Renders the sample into `dir` (which must exist). Throws trimkv::Error{Io} naming the file when
// the PNG cannot be written. withImages = false (a text model): a question without an image.
SampleTurn makeSampleTurn(const QString& dir, bool withImages = true);
