// NumPy's array files: `.npy` (one array, np.save) and `.npz` (a zip of
// `.npy` members, np.savez / np.savez_compressed), read and written.
//
//   NpyArray x = read_npy("x.npy", "--x");          // x.tensor: f32 or i32
//   auto named = read_arrays("data.npz", "--x");    // {"image": ..., "label": ...}
//   write_output_file("y.npy", ..., npy_bytes(predictions));
//
// Read: float16, float32, float64, int8 to int64, uint8 to uint64 and bool, either
// byte order, C order (version 1, 2 and 3 headers). Tensors hold f32 or
// i32 only, so floating types become f32 and the others i32; a value that
// does not survive that (an int64 beyond int32, a float64 beyond float32's
// range) is an error naming file and element, as is NaN or infinity: data
// holding them would only make a NaN loss. Object arrays (pickles) are never
// read. Sizes are checked against the file (and an .npz member's declared
// size against its compressed size) before anything is allocated.
//
// Written: '<f4' or '<i4' arrays, version 1.0 headers (np.load reads them),
// an .npz with its members stored uncompressed, as np.savez does.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autoshard/tensor/tensor.h"

namespace autoshard {

// The element types a file may hold, by NumPy's names.
enum class NpyType {
  Bool,
  Int8,
  Int16,
  Int32,
  Int64,
  UInt8,
  UInt16,
  UInt32,
  UInt64,
  Float16,
  Float32,
  Float64
};
const char* npy_type_name(NpyType type);  // "float16", "int64", "bool", ...
bool npy_is_floating(NpyType type);

// One array: its values, and the type they were stored as.
struct NpyArray {
  Tensor tensor;  // f32 for floating types, i32 for integers and bools
  NpyType stored = NpyType::Float32;
};

// One .npy file. `what` names the input in errors ("--x").
NpyArray read_npy(const std::string& path, const std::string& what);
// An .npz file's arrays by name (a member "x.npy" is "x").
std::map<std::string, NpyArray> read_npz(const std::string& path, const std::string& what);
// Either, told apart by their first bytes (a zip or NumPy's magic): an
// .npy's one array is keyed "".
std::map<std::string, NpyArray> read_arrays(const std::string& path, const std::string& what);
// .npy bytes already in memory (a whole file), e.g. from a fuzzer.
NpyArray parse_npy(std::string_view bytes, const std::string& what);

// `array`'s values as `dtype`: i32 to f32 as is; f32 to i32 only when every
// value is a whole number in int32's range (token ids saved as floats).
// `what` names the array in errors ("--x 'x.npz' key 'ids'").
Tensor npy_as(const NpyArray& array, DType dtype, const std::string& what);

// The .npy file of a tensor ('<f4' or '<i4', C order).
std::string npy_bytes(const Tensor& tensor);
// The .npz file of named tensors, in this order (members "<name>.npy").
std::string npz_bytes(const std::vector<std::pair<std::string, Tensor>>& arrays);

}  // namespace autoshard
