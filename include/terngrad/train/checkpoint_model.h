// The network a checkpoint holds, as terngrad-eval and terngrad-export rebuild it: the model configuration from the
// header (net sizes and the structure flags it was trained with) and the weights, or their moving averages, read
// into a ParameterStore (parameters and BN statistics; names through CheckpointLayout).
#pragma once

#include "terngrad/models/registry.h"
#include "terngrad/train/checkpoint.h"

namespace tg {

class Backend;
class ParameterStore;

// Image size, channels, classes and the structure flags (aux_logits, padding_style) the checkpoint was trained with.
ModelConfig checkpoint_model_config(const CheckpointMeta& meta);

// Fills store's parameters and state from the checkpoint: the moving averages (averages = true, what
// terngrad-eval's --restore_avg_var and terngrad-export's --weights ema read) or the values themselves.
void load_checkpoint_weights(const CheckpointReader& reader, Backend& backend, ParameterStore& store, bool averages);

}  // namespace tg
