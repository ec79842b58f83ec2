#include "screenshot_run.h"

#include <QPixmap>
#include <QScrollBar>
#include <cstdio>
#include <exception>
#include <utility>

#include "conversation_view.h"
#include "head_grid.h"
#include "main_window.h"
#include "sample_turn.h"

ScreenshotRun::ScreenshotRun(MainWindow* window, QString outputPath, QObject* parent)
    : QObject(parent), m_window(window), m_output(std::move(outputPath)) {
  m_window->setErrorDialogsEnabled(false);  // errors end the run instead
  m_timeout.setSingleShot(true);
  m_timeout.setInterval(kTimeoutMs);
  connect(&m_timeout, &QTimer::timeout, this, [this] { fail(2, tr("timed out")); });
  connect(m_window, &MainWindow::errorReported, this,
          [this](const QString& title, const QString& message) { fail(1, title + QStringLiteral(": ") + message); });
  // The model's default eviction settings are applied right after modelLoaded (queued before the
  // turn), so the sample runs under them.
  connect(m_window, &MainWindow::modelLoaded, this, [this] { runSample(); });
  connect(m_window, &MainWindow::answerFinished, this, [this] {
    // Let the last frame reach the widgets and the layout settle before rendering.
    QTimer::singleShot(300, this, &ScreenshotRun::capture);
  });
}

void ScreenshotRun::start(const QString& modelDir) {
  m_timeout.start();
  m_window->openModel(modelDir);
}

void ScreenshotRun::setTurn(const QString& text, const QStringList& images) {
  m_text = text;
  m_images = images;
  m_ownTurn = true;
}

void ScreenshotRun::runSample() {
  if (m_ownTurn) return m_window->sendTurn(m_text, m_images);
  if (!m_samples.isValid()) return fail(1, tr("cannot create a temporary folder for the sample image"));
  try {
    const SampleTurn turn = makeSampleTurn(m_samples.path(), m_window->model().vision.takes_images());
    m_window->sendTurn(turn.text, turn.images);
  } catch (const std::exception& e) {
    fail(1, QString::fromStdString(e.what()));
  }
}

void ScreenshotRun::capture() {
  if (m_done) return;
  // Show the head that keeps the fewest image entries but some: its overlay shows which patches
  // survived (a head that keeps all or none shows nothing of interest). With no image in the
  // conversation (a text model), the head that keeps the fewest text entries but some: the
  // strip then shows what the tightest head kept of the prompt.
  HeadGrid* grid = m_window->headGrid();
  auto pick = [grid](auto count) {
    std::pair<int, int> at{0, 0};
    int64_t best = -1;
    for (int l = 0; l < grid->layerCount(); ++l)
      for (int h = 0; h < grid->headCount(); ++h) {
        const int64_t n = count(grid->cellCounts(l, h));
        if (n > 0 && (best < 0 || n < best)) {
          best = n;
          at = {l, h};
        }
      }
    return std::pair{at, best};
  };
  auto [head, kept] = pick([](const auto& c) { return c.image; });
  if (kept < 0) head = pick([](const auto& c) { return c.text; }).first;
  grid->setSelectedHead(head.first, head.second);
  // The answer in view: a long prompt would otherwise fill the conversation pane.
  QScrollBar* bar = m_window->conversation()->verticalScrollBar();
  bar->setValue(bar->maximum());
  const QPixmap shot = m_window->grab();
  if (shot.isNull() || !shot.save(m_output, "PNG")) return fail(1, tr("cannot write %1").arg(m_output));
  m_done = true;
  std::fprintf(stderr, "trimkv-studio: saved %s (%dx%d)\n", qPrintable(m_output), shot.width(), shot.height());
  Q_EMIT finished(0);
}

void ScreenshotRun::fail(int code, const QString& message) {
  if (m_done) return;
  m_done = true;
  std::fprintf(stderr, "trimkv-studio: --screenshot failed: %s\n", qPrintable(message));
  Q_EMIT finished(code);
}
