// The network a checkpoint holds: its configuration from the header, its weights or their moving averages.
#include "terngrad/train/checkpoint_model.h"

#include "terngrad/nn/net.h"
#include "terngrad/optim/moving_average.h"

namespace tg {

ModelConfig checkpoint_model_config(const CheckpointMeta& m) {
  ModelConfig mc;
  mc.image_size = m.image_size;
  mc.channels = m.channels;
  mc.num_classes = m.num_classes;
  auto aux = m.flags.find("aux_logits");
  if (aux != m.flags.end()) mc.aux_logits = aux->second == "true";
  auto padding = m.flags.find("padding_style");  // absent from checkpoints written before the flag: tf
  if (padding != m.flags.end()) mc.padding_style = parse_enum<PaddingStyle>(padding->second);
  return mc;
}

void load_checkpoint_weights(const CheckpointReader& reader, Backend& backend, ParameterStore& store, bool averages) {
  using Layout = CheckpointLayout;
  auto load = [&](Layout::Part part, Slab& slab) {
    read_slab(reader, backend, slab, [&](const std::string& name) {
      return averages ? Layout::name(Layout::kEma, ExponentialMovingAverage::shadow_name(name))
                      : Layout::name(part, name);
    });
  };
  load(Layout::kParams, store.params());
  load(Layout::kState, store.state());
}

}  // namespace tg
