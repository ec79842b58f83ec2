#include "scripted_turns.h"

#include "main_window.h"

ScriptedTurns::ScriptedTurns(MainWindow* window, QStringList prompts, QStringList images)
    : QObject(window), m_window(window), m_prompts(std::move(prompts)), m_images(std::move(images)) {
  // Queued: the answer's own bookkeeping (autosave, the inspector) finishes before the next turn.
  connect(m_window, &MainWindow::answerFinished, this, [this](const TurnStats&) { sendNext(); }, Qt::QueuedConnection);
}

void ScriptedTurns::start() {
  if (m_next == 0) sendNext();
}

void ScriptedTurns::sendNext() {
  if (m_next >= m_prompts.size()) return;
  const QStringList images = m_next == 0 ? m_images : QStringList();
  m_window->sendTurn(m_prompts[m_next++], images);
}
