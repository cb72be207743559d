// CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78), as used by TFRecord framing and the
// checkpoint tensor table. crc32c() uses the SSE4.2 `crc32` instruction when the CPU has it and a
// slicing-by-8 table otherwise; crc32c_portable() is always the table version (the test oracle).
// crc32c_mask()/crc32c_unmask() are TFRecord's masking: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tg {

// CRC of `n` bytes continuing from `init` (0 for a fresh CRC): crc32c_extend(crc32c(a), b) == crc32c(a+b).
uint32_t crc32c_extend(uint32_t init, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

// Table-only implementation (no CPU instruction); same results.
uint32_t crc32c_portable_extend(uint32_t init, const void* data, size_t n);

// True when crc32c() runs on the SSE4.2 instruction.
bool crc32c_hardware_available();

constexpr uint32_t kCrc32cMaskDelta = 0xa282ead8u;
inline uint32_t crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kCrc32cMaskDelta; }
inline uint32_t crc32c_unmask(uint32_t masked) {
  uint32_t rot = masked - kCrc32cMaskDelta;
  return (rot >> 17) | (rot << 15);
}

}  // namespace tg
