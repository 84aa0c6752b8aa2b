// Crash points: named places where a test can have the process killed, to
// check that nothing a user saved is lost whatever moment a job dies at.
// AUTOSHARD_CRASH_AT="NAME" (or "NAME:K", the K-th time it is reached)
// makes the process SIGKILL itself there, exactly as `kill -9` would.
// Unset, a crash point costs one comparison.
//
// The points: "train.step" (after each training step), "checkpoint.write"
// (a save with its weights written and its optimizer state not yet),
// "checkpoint.rename" (a save complete on disk, not yet renamed into place),
// "checkpoint.done" (a save renamed into place: between two saves).
#pragma once

namespace autoshard {

void crash_point(const char* name);

}  // namespace autoshard
