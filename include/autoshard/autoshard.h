// The user-facing API in one include: models and layers, distributions over
// device meshes, optimizers, checkpoints and the GPT-2 formats.
#pragma once

#include "autoshard/error.h"
#include "autoshard/io/checkpoint.h"
#include "autoshard/io/gpt2_formats.h"
#include "autoshard/io/hf_checkpoint.h"
#include "autoshard/io/language_model.h"
#include "autoshard/io/llama_formats.h"
#include "autoshard/io/opt_formats.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/io/token_data.h"
#include "autoshard/io/tokenizer.h"
#include "autoshard/nn/generation.h"
#include "autoshard/nn/layers.h"
#include "autoshard/nn/losses.h"
#include "autoshard/nn/model.h"
#include "autoshard/nn/models/gpt2.h"
#include "autoshard/nn/models/llama.h"
#include "autoshard/nn/models/opt.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/plan/distribution.h"
