// What the Studio tells a user about a model trained on the project's synthetic world (the
// built-in demo model, or any folder `trimkv train-demo` wrote): what it knows, so that nobody
// mistakes it for a general model, and a note when a question lies outside that world.
#pragma once
#include <QString>

// The folder holds a demo-world model: its chat template is the demo model's (images numbered
// "Image k:"), as the built-in model's and every `train-demo` folder's is.
bool isDemoWorldModel(const QString& dir);

// The "Try your own" hint shown above the input while such a model is loaded (rich text).
QString demoWorldHint();

// Whether a question is one the demo world asks, in any of its wordings (world::parse_question):
// false for "Tell me a story", "What animal is this?" or "How many objects are there?".
bool inDemoWorld(const QString& question);

// The note shown when a question is outside the world (rich text, one sentence).
QString outsideDemoWorldNote();
