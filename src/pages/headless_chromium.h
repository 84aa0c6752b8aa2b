// A page rendered to a PNG by a headless Chromium (`chromium --headless
// --screenshot`), for `autoshard report --png` and tools/render_pages.sh:
// Chromium is not a dependency of autoshard (it is big), so a missing one is
// an error saying how to install it.
#pragma once

#include <string>

namespace autoshard {

// The first of chromium, chromium-browser, google-chrome on PATH, or "".
std::string find_chromium();

// find_chromium(), or an error naming `flag` that says how to install one.
std::string require_chromium(const std::string& flag);

// Renders the HTML file `html` (a path) to `png` at `width` x `height` CSS
// pixels. Throws autoshard::Error naming `flag` when no Chromium is found,
// or when it fails or takes more than two minutes (with its last words).
void render_png(const std::string& html, const std::string& png, int width, int height,
                const std::string& flag);

}  // namespace autoshard
