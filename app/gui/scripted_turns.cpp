#include "scripted_turns.h"

#include <cstdio>

#include "main_window.h"

ScriptedTurns::ScriptedTurns(MainWindow* window, QStringList prompts, QStringList images)
    : QObject(window), m_window(window), m_prompts(std::move(prompts)), m_images(std::move(images)) {
  // Queued: the answer's own bookkeeping (autosave, the inspector) finishes before the next turn.
  connect(
      m_window, &MainWindow::answerFinished, this,
      [this](const TurnStats& stats) {
        if (stats.stopReason == QLatin1String("cancelled")) stop(QStringLiteral("stopped"));
        else sendNext();
      },
      Qt::QueuedConnection);
  connect(m_window, &MainWindow::turnFailed, this, [this](const QString& message) { stop(message); },
          Qt::QueuedConnection);
}

void ScriptedTurns::start() {
  if (m_next > 0) return;
  m_running = true;
  sendNext();
}

void ScriptedTurns::sendNext() {
  if (!m_running) return;
  if (m_next == m_prompts.size()) {  // every turn answered
    m_running = false;
    return;
  }
  if (m_window->isAnswering()) return;  // a turn the user sent meanwhile: its end sends ours
  const QStringList images = m_next == 0 ? m_images : QStringList();
  const QString text = m_prompts[m_next++];
  std::fprintf(stderr, "trimkv-studio: sent scripted turn %d of %d\n", m_next, static_cast<int>(m_prompts.size()));
  std::fflush(stderr);
  m_window->sendTurn(text, images);
}

void ScriptedTurns::stop(const QString& why) {
  if (!m_running) return;
  std::fprintf(stderr, "trimkv-studio: scripted turn %d failed (%s); %d not sent\n", m_next, qPrintable(why),
               static_cast<int>(m_prompts.size()) - m_next);
  std::fflush(stderr);
  m_running = false;
}
