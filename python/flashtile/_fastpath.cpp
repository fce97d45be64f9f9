// _fastpath.cpp — the warm call of flash_attn_func and attention() in C++, against PyTorch's C++ API.
//
// A call shape (the tensors' shapes, strides, dtype and device, and every flag) that the Python package checked and
// launched once is filed here with the flashtile_call it made, pointers left out. A later call of the same shape
// reads its tensors and flags here, allocates O and LSE, fills in the pointers and the current stream, and calls
// the C ABI's flashtile_forward_call: no Python bytecode, ctypes or torch.library dispatch between the caller and
// the launch. Anything this file does not recognise returns NotImplemented, and the caller takes the Python path,
// which checks everything (and files the shape for next time).
//
// Built per PyTorch version on first use (flashtile/_extension.py); the package works without it (ctypes).
// Exports one module, _fastpath, written against CPython's C API (no pybind11 in our code); PyTorch's C++ errors
// (an out-of-memory allocation) reach Python as PyTorch's own exceptions (HANDLE_TH_ERRORS).
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/python_variable.h>

#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

/// flashtile_forward_call (CApi.h): (runtime, const flashtile_call *) -> 0 or -1.
using ForwardCall = int (*)(void *, const void *);

/// The largest flashtile_call this file fills (init checks the library's size against it).
constexpr size_t kMaxCallBytes = 1024;
/// Filed call shapes before the table starts afresh (as the Python path's _PREPARED_LIMIT).
constexpr size_t kMaxEntries = 1024;
/// q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, stream: the flashtile_call's first eight pointers.
constexpr int kPointers = 8;

struct State {
  ForwardCall forwardCall = nullptr;
  void *runtime = nullptr;
  size_t pointersOffset = 0;
  size_t callBytes = 0;
  PyObject *currentStream = nullptr; // index -> the raw cudaStream_t of that device's current stream
  PyObject *forwardError = nullptr;  // () -> the FlashtileError of a failed flashtile_forward_call
};
State state;

/// A filed call shape: the flashtile_call's bytes without pointers, and what they point into.
struct Entry {
  std::string callBytes;
  PyObject *held = nullptr; // a tuple: the variant id's bytes (the call's `variant` points into them), and for a
                            // Variant object the object and its id string (their identity is part of the key)
  int deviceIndex = 0;
  std::vector<int64_t> outSizes, lseSizes;
};

/// What a launch reads of an entry, copied out of it before any Python code can run (and refile or drop it).
struct Launch {
  alignas(16) unsigned char call[kMaxCallBytes];
  PyObject *held; // a new reference: the call points into it
  int deviceIndex;
  int64_t outSizes[4], lseSizes[4];
  size_t outDims, lseDims;

  explicit Launch(const Entry &entry)
      : held(Py_NewRef(entry.held)), deviceIndex(entry.deviceIndex), outDims(entry.outSizes.size()),
        lseDims(entry.lseSizes.size()) {
    std::memcpy(call, entry.callBytes.data(), entry.callBytes.size());
    std::copy(entry.outSizes.begin(), entry.outSizes.end(), outSizes);
    std::copy(entry.lseSizes.begin(), entry.lseSizes.end(), lseSizes);
  }
  ~Launch() { Py_DECREF(held); }
  Launch(const Launch &) = delete;
  Launch &operator=(const Launch &) = delete;
};

std::unordered_map<std::string, Entry> entries;

void dropEntries() {
  for (auto &[key, entry] : entries)
    Py_XDECREF(entry.held);
  entries.clear();
}

// Keys --------------------------------------------------------------------------------------------------------------
// A key is the bytes of everything the Python path's checks read. Numbers keep their Python type (an int and a float
// are distinct keys) and their exact bits, so equal keys are calls the checked path treats identically.

void putBytes(std::string &key, const void *data, size_t size) { key.append(static_cast<const char *>(data), size); }

template <typename T> void put(std::string &key, T value) { putBytes(key, &value, sizeof(value)); }

/// An exact int (not bool) or float, as a tag and its value; false for anything else (NaN too: it never passes the
/// checks, so it is never filed).
bool putNumber(std::string &key, PyObject *o) {
  if (PyFloat_CheckExact(o)) {
    double value = PyFloat_AS_DOUBLE(o);
    if (value != value)
      return false;
    put<char>(key, 'f');
    put(key, value);
    return true;
  }
  if (PyLong_CheckExact(o)) {
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (value == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    put<char>(key, 'i');
    put(key, value);
    return true;
  }
  return false;
}

bool putOptionalNumber(std::string &key, PyObject *o) {
  if (o == Py_None) {
    put<char>(key, 'n');
    return true;
  }
  return putNumber(key, o);
}

bool putBool(std::string &key, PyObject *o) {
  if (o != Py_True && o != Py_False)
    return false;
  put<char>(key, o == Py_True ? 1 : 0);
  return true;
}

/// An exact str, or None where `noneAllowed`.
bool putString(std::string &key, PyObject *o, bool noneAllowed) {
  if (o == Py_None && noneAllowed) {
    put<char>(key, 'n');
    return true;
  }
  if (!PyUnicode_CheckExact(o))
    return false;
  Py_ssize_t size = 0;
  const char *text = PyUnicode_AsUTF8AndSize(o, &size);
  if (!text) {
    PyErr_Clear();
    return false;
  }
  put<char>(key, 's');
  put<int64_t>(key, size);
  putBytes(key, text, static_cast<size_t>(size));
  return true;
}

/// window_size as flash_attn_func's warm path takes it: a tuple of two exact ints.
bool putWindow(std::string &key, PyObject *o) {
  if (!PyTuple_CheckExact(o) || PyTuple_GET_SIZE(o) != 2)
    return false;
  for (Py_ssize_t i = 0; i < 2; ++i) {
    PyObject *side = PyTuple_GET_ITEM(o, i);
    if (!PyLong_CheckExact(side) || !putNumber(key, side))
      return false;
  }
  return true;
}

/// attention()'s params: None, or a dict of str -> exact int or float (sorted by name: equal dicts, equal keys).
bool putParams(std::string &key, PyObject *o) {
  if (o == Py_None) {
    put<char>(key, 'n');
    return true;
  }
  if (!PyDict_CheckExact(o))
    return false;
  std::vector<std::pair<std::string, PyObject *>> items;
  Py_ssize_t position = 0;
  PyObject *name = nullptr, *value = nullptr;
  while (PyDict_Next(o, &position, &name, &value)) {
    std::string text;
    if (!putString(text, name, false))
      return false;
    items.emplace_back(std::move(text), value);
  }
  std::sort(items.begin(), items.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
  put<char>(key, 'd');
  put<int64_t>(key, static_cast<int64_t>(items.size()));
  for (auto &[text, number] : items) {
    key += text;
    if (!putNumber(key, number))
      return false;
  }
  return true;
}

/// q, k, v: exact torch.Tensor objects of 4 dims, one fp16/bf16 dtype, on one CUDA device, with no gradient to
/// record; their shapes and strides go into the key.
bool putTensors(std::string &key, PyObject *const *objects, const at::Tensor **tensors) {
  auto *tensorType = reinterpret_cast<PyTypeObject *>(THPVariableClass);
  for (int i = 0; i < 3; ++i) {
    if (Py_TYPE(objects[i]) != tensorType)
      return false;
    tensors[i] = &THPVariable_Unpack(objects[i]);
  }
  const at::Tensor &q = *tensors[0];
  c10::ScalarType dtype = q.scalar_type();
  if (dtype != c10::ScalarType::Half && dtype != c10::ScalarType::BFloat16)
    return false;
  c10::Device device = q.device();
  if (!device.is_cuda())
    return false;
  bool wantsGrad = at::GradMode::is_enabled();
  put<int8_t>(key, static_cast<int8_t>(dtype));
  put<int16_t>(key, device.index());
  for (int i = 0; i < 3; ++i) {
    const at::Tensor &t = *tensors[i];
    if (t.dim() != 4 || t.scalar_type() != dtype || t.device() != device || (wantsGrad && t.requires_grad()))
      return false;
    putBytes(key, t.sizes().data(), 4 * sizeof(int64_t));
    putBytes(key, t.strides().data(), 4 * sizeof(int64_t));
  }
  return true;
}

/// flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, schedule, strict)
/// as a key (args[0..10]); false when the call is not one this file serves.
bool denseKey(PyObject *const *args, std::string &key, const at::Tensor **tensors) {
  key.reserve(256);
  put<char>(key, 'D');
  return putTensors(key, args, tensors) && putNumber(key, args[3]) && putOptionalNumber(key, args[4]) &&
         putBool(key, args[5]) && putWindow(key, args[6]) && putNumber(key, args[7]) && args[8] == Py_None &&
         putString(key, args[9], true) && putBool(key, args[10]);
}

/// attention(q, k, v, variant, params, softmax_scale, schedule, strict) as a key (args[0..7]). A variant is a
/// built-in's name, or a flashtile.Variant by identity and by its registered id (a changed Variant drops its id).
bool attentionKey(PyObject *const *args, std::string &key, const at::Tensor **tensors, PyObject **variantId) {
  key.reserve(256);
  put<char>(key, 'A');
  if (!putTensors(key, args, tensors))
    return false;
  PyObject *variant = args[3];
  *variantId = nullptr;
  if (PyUnicode_CheckExact(variant)) {
    if (!putString(key, variant, false))
      return false;
  } else {
    static PyObject *idName = PyUnicode_InternFromString("_id");
    PyObject *id = PyObject_GetAttr(variant, idName);
    if (!id) {
      PyErr_Clear();
      return false;
    }
    bool registered = PyUnicode_CheckExact(id);
    Py_DECREF(id); // the entry holds the id string; the variant holds it as long as it is unchanged
    if (!registered)
      return false;
    put<char>(key, 'v');
    put(key, reinterpret_cast<uintptr_t>(variant));
    put(key, reinterpret_cast<uintptr_t>(id));
    *variantId = id;
  }
  return putParams(key, args[4]) && putOptionalNumber(key, args[5]) && putString(key, args[6], true) &&
         putBool(key, args[7]);
}

// Launch -------------------------------------------------------------------------------------------------------------

int currentDevice() { return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice().index(); }

/// The filed call with this call's tensors: O and LSE from PyTorch's allocator, launched on the current stream.
/// NotImplemented when the call must take the checked path after all (an unaligned view, another current device).
PyObject *launch(Launch &filed, const at::Tensor *const *tensors, bool withLse, bool flashAttnResult) {
  const at::Tensor &q = *tensors[0];
  auto qPtr = reinterpret_cast<uintptr_t>(q.data_ptr());
  auto kPtr = reinterpret_cast<uintptr_t>(tensors[1]->data_ptr());
  auto vPtr = reinterpret_cast<uintptr_t>(tensors[2]->data_ptr());
  if ((qPtr | kPtr | vPtr) % 16 || filed.deviceIndex != currentDevice())
    Py_RETURN_NOTIMPLEMENTED;
  PyObject *index = PyLong_FromLong(filed.deviceIndex);
  if (!index)
    return nullptr;
  PyObject *streamObject = PyObject_CallOneArg(state.currentStream, index);
  Py_DECREF(index);
  if (!streamObject)
    return nullptr;
  auto stream = static_cast<uint64_t>(PyLong_AsUnsignedLongLong(streamObject));
  Py_DECREF(streamObject);
  if (PyErr_Occurred())
    return nullptr;
  at::Tensor out = at::empty(c10::IntArrayRef(filed.outSizes, filed.outDims), q.options());
  at::Tensor lse =
      at::empty(c10::IntArrayRef(filed.lseSizes, filed.lseDims), q.options().dtype(c10::ScalarType::Float));
  auto outPtr = reinterpret_cast<uintptr_t>(out.data_ptr());
  auto lsePtr = reinterpret_cast<uintptr_t>(lse.data_ptr());
  const uint64_t pointers[kPointers] = {qPtr, kPtr, vPtr, outPtr, lsePtr, 0, 0, stream};
  std::memcpy(filed.call + state.pointersOffset, pointers, sizeof(pointers));
  PyThreadState *thread = PyEval_SaveThread(); // the GIL is released during the launch, as ctypes does
  int rc = state.forwardCall(state.runtime, filed.call);
  PyEval_RestoreThread(thread);
  if (rc != 0) {
    PyObject *error = PyObject_CallNoArgs(state.forwardError);
    if (error) {
      PyErr_SetObject(reinterpret_cast<PyObject *>(Py_TYPE(error)), error);
      Py_DECREF(error);
    }
    return nullptr;
  }
  PyObject *outObject = THPVariable_Wrap(std::move(out));
  if (!withLse || !outObject)
    return outObject;
  PyObject *lseObject = THPVariable_Wrap(std::move(lse));
  if (!lseObject) {
    Py_DECREF(outObject);
    return nullptr;
  }
  return flashAttnResult ? Py_BuildValue("(NNO)", outObject, lseObject, Py_None)
                         : Py_BuildValue("(NN)", outObject, lseObject);
}

/// The call shape filed under `key` launched with these tensors (withLse: the caller's flag for the LSE), or
/// NotImplemented when none is filed.
PyObject *launchFiled(const std::string &key, const at::Tensor *const *tensors, PyObject *withLse,
                      bool flashAttnResult) {
  int lse = PyObject_IsTrue(withLse);
  if (lse < 0)
    return nullptr;
  auto it = entries.find(key);
  if (it == entries.end())
    Py_RETURN_NOTIMPLEMENTED;
  Launch filed(it->second);
  return launch(filed, tensors, lse, flashAttnResult);
}

bool ready() {
  if (state.forwardCall)
    return true;
  PyErr_SetString(PyExc_RuntimeError, "flashtile._fastpath: init() was not called");
  return false;
}

bool argCount(const char *name, Py_ssize_t given, Py_ssize_t wanted) {
  if (given == wanted)
    return true;
  PyErr_Format(PyExc_TypeError, "%s takes %zd arguments, got %zd", name, wanted, given);
  return false;
}

/// Files `callBytes` (bytes), `held` (a new tuple, taken over; null: the error is set), O and LSE's sizes (from the
/// tensors out and lse) and the device under `key`.
PyObject *file(std::string &&key, PyObject *callBytes, PyObject *held, PyObject *out, PyObject *lse,
               PyObject *deviceIndex) {
  if (!held)
    return nullptr;
  auto *tensorType = reinterpret_cast<PyTypeObject *>(THPVariableClass);
  if (!PyBytes_CheckExact(callBytes) || static_cast<size_t>(PyBytes_GET_SIZE(callBytes)) != state.callBytes ||
      Py_TYPE(out) != tensorType || Py_TYPE(lse) != tensorType || THPVariable_Unpack(out).dim() > 4 ||
      THPVariable_Unpack(lse).dim() > 4) {
    Py_DECREF(held);
    PyErr_SetString(PyExc_TypeError, "flashtile._fastpath: file(..., call bytes, variant id, out, lse, device)");
    return nullptr;
  }
  long index = PyLong_AsLong(deviceIndex);
  if (index == -1 && PyErr_Occurred()) {
    Py_DECREF(held);
    return nullptr;
  }
  if (entries.size() >= kMaxEntries)
    dropEntries();
  Entry entry;
  entry.callBytes.assign(PyBytes_AS_STRING(callBytes), state.callBytes);
  entry.deviceIndex = static_cast<int>(index);
  entry.outSizes = THPVariable_Unpack(out).sizes().vec();
  entry.lseSizes = THPVariable_Unpack(lse).sizes().vec();
  entry.held = held;
  auto [it, inserted] = entries.try_emplace(std::move(key), std::move(entry));
  if (!inserted) {
    Py_XDECREF(it->second.held);
    it->second = std::move(entry);
  }
  Py_RETURN_TRUE;
}

// Module functions -------------------------------------------------------------------------------------------------

/// init(forward_call address, runtime address, pointers' offset, flashtile_call size, current_stream, forward_error)
PyObject *init(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (!argCount("init", nargs, 6))
    return nullptr;
  auto forwardCall = reinterpret_cast<ForwardCall>(PyLong_AsVoidPtr(args[0]));
  void *runtime = PyLong_AsVoidPtr(args[1]);
  size_t offset = PyLong_AsSize_t(args[2]);
  size_t callBytes = PyLong_AsSize_t(args[3]);
  if (PyErr_Occurred())
    return nullptr;
  if (!forwardCall || !runtime || callBytes > kMaxCallBytes || offset + kPointers * sizeof(uint64_t) > callBytes ||
      !PyCallable_Check(args[4]) || !PyCallable_Check(args[5])) {
    PyErr_SetString(PyExc_ValueError, "flashtile._fastpath.init: bad library, runtime or call layout");
    return nullptr;
  }
  dropEntries();
  Py_XSETREF(state.currentStream, Py_NewRef(args[4]));
  Py_XSETREF(state.forwardError, Py_NewRef(args[5]));
  state.forwardCall = forwardCall;
  state.runtime = runtime;
  state.pointersOffset = offset;
  state.callBytes = callBytes;
  Py_RETURN_NONE;
}

/// dense(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, schedule, strict,
///       return_attn_probs): flash_attn_func's result, or NotImplemented.
PyObject *dense(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (!argCount("dense", nargs, 12) || !ready())
    return nullptr;
  std::string key;
  const at::Tensor *tensors[3];
  if (!denseKey(args, key, tensors))
    Py_RETURN_NOTIMPLEMENTED;
  return launchFiled(key, tensors, args[11], true);
  END_HANDLE_TH_ERRORS
}

/// file_dense(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, schedule, strict, call bytes,
///            variant id bytes, out, lse, device index): True when filed (False: a call dense() does not serve).
PyObject *fileDense(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (!argCount("file_dense", nargs, 15) || !ready())
    return nullptr;
  PyObject *keyArgs[11] = {args[0], args[1], args[2], args[3], args[4], args[5],
                           args[6], args[7], Py_None, args[8], args[9]};
  std::string key;
  const at::Tensor *tensors[3];
  if (!denseKey(keyArgs, key, tensors))
    Py_RETURN_FALSE;
  return file(std::move(key), args[10], PyTuple_Pack(1, args[11]), args[12], args[13], args[14]);
  END_HANDLE_TH_ERRORS
}

/// attention(q, k, v, variant, params, softmax_scale, schedule, strict, inputs, cu_seqlens_q, cu_seqlens_k,
///           max_seqlen_q, max_seqlen_k, return_lse): attention()'s result, or NotImplemented.
PyObject *attention(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (!argCount("attention", nargs, 14) || !ready())
    return nullptr;
  for (int i = 8; i < 13; ++i)
    if (args[i] != Py_None)
      Py_RETURN_NOTIMPLEMENTED;
  std::string key;
  const at::Tensor *tensors[3];
  PyObject *variantId = nullptr;
  if (!attentionKey(args, key, tensors, &variantId))
    Py_RETURN_NOTIMPLEMENTED;
  return launchFiled(key, tensors, args[13], false);
  END_HANDLE_TH_ERRORS
}

/// file_attention(q, k, v, variant, params, softmax_scale, schedule, strict, call bytes, variant id bytes, out, lse,
///                device index): True when filed.
PyObject *fileAttention(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (!argCount("file_attention", nargs, 13) || !ready())
    return nullptr;
  std::string key;
  const at::Tensor *tensors[3];
  PyObject *variantId = nullptr;
  if (!attentionKey(args, key, tensors, &variantId))
    Py_RETURN_FALSE;
  // A Variant's key holds its address and its id string's: the entry keeps both alive, so neither is reused.
  PyObject *held = variantId ? PyTuple_Pack(3, args[9], args[3], variantId) : PyTuple_Pack(1, args[9]);
  return file(std::move(key), args[8], held, args[10], args[11], args[12]);
  END_HANDLE_TH_ERRORS
}

PyObject *clear(PyObject *, PyObject *) {
  dropEntries();
  Py_RETURN_NONE;
}

PyObject *size(PyObject *, PyObject *) { return PyLong_FromSize_t(entries.size()); }

PyMethodDef methods[] = {
    {"init", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(init)), METH_FASTCALL,
     "init(forward_call, runtime, pointers_offset, call_size, current_stream, forward_error)"},
    {"dense", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(dense)), METH_FASTCALL,
     "flash_attn_func's warm call, or NotImplemented"},
    {"file_dense", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fileDense)), METH_FASTCALL,
     "files a flash_attn_func call shape"},
    {"attention", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(attention)), METH_FASTCALL,
     "attention()'s warm call, or NotImplemented"},
    {"file_attention", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fileAttention)), METH_FASTCALL,
     "files an attention() call shape"},
    {"clear", clear, METH_NOARGS, "drops every filed call shape"},
    {"size", size, METH_NOARGS, "how many call shapes are filed"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef moduleDef = {PyModuleDef_HEAD_INIT,
                         "_fastpath",
                         "flashtile's warm calls in C++",
                         -1,
                         methods,
                         nullptr,
                         nullptr,
                         nullptr,
                         nullptr};

} // namespace

PyMODINIT_FUNC PyInit__fastpath() { return PyModule_Create(&moduleDef); }
