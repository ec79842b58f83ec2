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

// Whether a question speaks of the demo world at all: a shape or colour it knows, counting, a
// position or an image number. False for "Tell me a story" or "What animal is this?".
bool inDemoWorld(const QString& question);

// The note shown when a question is outside the world (rich text, one sentence).
QString outsideDemoWorldNote();
