// SPDX-License-Identifier: GPL-2.0

//! A reader of BTF, the kernel's type information (`/sys/kernel/btf/vmlinux`, and a
//! module's own BTF, split on top of vmlinux's): the functions, their parameters'
//! names and types, and what a value of a type is (an integer and its sign, a
//! pointer, a string, an enum, a structure passed by value), for the `args` option's
//! typed arguments and return values.
//!
//! It allocates nothing: [`Raw::parse`] checks the header and finds the sections, the
//! caller provides the index of type offsets ([`Raw::count`] says how long it must be;
//! [`Raw::index`] fills it) and, for lookups by name, an index of functions sorted by
//! name ([`Btf::func_index`]). Every read is bounds-checked: bad bytes give an
//! [`Error`], never a panic, and chains of types are followed at most [`MAX_DEPTH`]
//! steps.
//!
//! Format: Documentation/bpf/btf.rst in the kernel tree. Tested on the host against the
//! distro test kernel's BTF, with bpftool's own decoding as the reference
//! (`tests/btf.rs`).

use core::fmt::{self, Write};

/// BTF's magic number (little-endian `9f eb`).
pub const MAGIC: u16 = 0xeb9f;

/// The longest chain of modifiers, typedefs and pointers followed.
pub const MAX_DEPTH: usize = 32;

/// What is wrong with the bytes (or the question).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Shorter than the header, or a section outside the data.
    Short,
    /// Not BTF (magic), or a byte order or version this reader does not know.
    Magic,
    /// A type record of an unknown kind, at this type id.
    Kind(u32),
    /// A type record cut short, at this type id.
    Truncated(u32),
    /// The index is not as long as [`Raw::count`] says.
    Index,
    /// A type id that does not exist.
    Id(u32),
    /// A chain of types longer than [`MAX_DEPTH`] (a loop).
    Depth,
}

/// The kinds of BTF types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int,
    Ptr,
    Array,
    Struct,
    Union,
    Enum,
    Fwd,
    Typedef,
    Volatile,
    Const,
    Restrict,
    Func,
    FuncProto,
    Var,
    Datasec,
    Float,
    DeclTag,
    TypeTag,
    Enum64,
}

impl Kind {
    fn from_raw(k: u32) -> Option<Kind> {
        use Kind::*;
        Some(match k {
            1 => Int,
            2 => Ptr,
            3 => Array,
            4 => Struct,
            5 => Union,
            6 => Enum,
            7 => Fwd,
            8 => Typedef,
            9 => Volatile,
            10 => Const,
            11 => Restrict,
            12 => Func,
            13 => FuncProto,
            14 => Var,
            15 => Datasec,
            16 => Float,
            17 => DeclTag,
            18 => TypeTag,
            19 => Enum64,
            _ => return None,
        })
    }

    /// Bytes that follow the 12-byte common part of a record with `vlen` entries.
    fn extra_len(self, vlen: usize) -> usize {
        use Kind::*;
        match self {
            Int | Var | DeclTag => 4,
            Array => 12,
            Struct | Union | Datasec | Enum64 => 12 * vlen,
            Enum | FuncProto => 8 * vlen,
            _ => 0,
        }
    }
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    let w = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

/// One type record.
#[derive(Debug, Clone, Copy)]
pub struct Type<'a> {
    pub id: u32,
    pub kind: Kind,
    pub name_off: u32,
    info: u32,
    size_or_type: u32,
    extra: &'a [u8],
}

impl<'a> Type<'a> {
    /// The number of members, values or parameters.
    pub fn vlen(&self) -> usize {
        (self.info & 0xffff) as usize
    }

    /// The kind flag (a union for `Fwd`, signed values for `Enum`/`Enum64`).
    pub fn kind_flag(&self) -> bool {
        self.info >> 31 != 0
    }

    /// The size in bytes (`Int`, `Struct`, `Union`, `Enum`, `Enum64`, `Float`,
    /// `Datasec`).
    pub fn size(&self) -> u32 {
        self.size_or_type
    }

    /// The type this one refers to (`Ptr`, `Typedef`, modifiers, `Func`, `Var`,
    /// `DeclTag`), or a function prototype's return type.
    pub fn type_id(&self) -> u32 {
        self.size_or_type
    }

    /// `Int`: (signed, char, bool, bits).
    pub fn int_encoding(&self) -> (bool, bool, bool, u32) {
        let v = u32_at(self.extra, 0).unwrap_or(0);
        let enc = (v >> 24) & 0xf;
        (enc & 1 != 0, enc & 2 != 0, enc & 4 != 0, v & 0xff)
    }

    /// `Array`: (element type, number of elements).
    pub fn array(&self) -> (u32, u32) {
        (
            u32_at(self.extra, 0).unwrap_or(0),
            u32_at(self.extra, 8).unwrap_or(0),
        )
    }

    /// `FuncProto`: its parameters; a variadic one ends with a parameter of type 0 and
    /// no name.
    pub fn params(&self) -> impl Iterator<Item = Param> + 'a {
        let extra = self.extra;
        let n = if self.kind == Kind::FuncProto {
            self.vlen()
        } else {
            0
        };
        (0..n).filter_map(move |i| {
            Some(Param {
                name_off: u32_at(extra, i * 8)?,
                type_id: u32_at(extra, i * 8 + 4)?,
            })
        })
    }

    /// `Enum` (32-bit values) or `Enum64`: its values, as (name offset, value).
    pub fn enum_values(&self) -> impl Iterator<Item = (u32, u64)> + 'a {
        let extra = self.extra;
        let (n, stride) = match self.kind {
            Kind::Enum => (self.vlen(), 8),
            Kind::Enum64 => (self.vlen(), 12),
            _ => (0, 8),
        };
        let signed = self.kind_flag();
        (0..n).filter_map(move |i| {
            let name = u32_at(extra, i * stride)?;
            let lo = u32_at(extra, i * stride + 4)?;
            let v = if stride == 12 {
                u64::from(lo) | u64::from(u32_at(extra, i * stride + 8)?) << 32
            } else if signed {
                lo as i32 as i64 as u64
            } else {
                u64::from(lo)
            };
            Some((name, v))
        })
    }
}

/// A parameter of a function prototype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    pub name_off: u32,
    pub type_id: u32,
}

/// BTF bytes whose header was checked, before they are indexed.
#[derive(Debug, Clone, Copy)]
pub struct Raw<'a> {
    types: &'a [u8],
    strs: &'a [u8],
}

impl<'a> Raw<'a> {
    /// Checks the header (magic, version 1, little-endian) and finds the type and
    /// string sections.
    pub fn parse(data: &'a [u8]) -> Result<Raw<'a>, Error> {
        let magic = data.get(0..2).ok_or(Error::Short)?;
        if u16::from_le_bytes([magic[0], magic[1]]) != MAGIC || data.get(2) != Some(&1) {
            return Err(Error::Magic);
        }
        let hdr_len = u32_at(data, 4).ok_or(Error::Short)? as usize;
        let field = |i: usize| {
            u32_at(data, 8 + 4 * i)
                .map(|v| v as usize)
                .ok_or(Error::Short)
        };
        let (type_off, type_len, str_off, str_len) = (field(0)?, field(1)?, field(2)?, field(3)?);
        let section = |off: usize, len: usize| {
            let start = hdr_len.checked_add(off).ok_or(Error::Short)?;
            data.get(start..start.checked_add(len).ok_or(Error::Short)?)
                .ok_or(Error::Short)
        };
        if hdr_len < 24 {
            return Err(Error::Short);
        }
        Ok(Raw {
            types: section(type_off, type_len)?,
            strs: section(str_off, str_len)?,
        })
    }

    /// Walks the type records: calls `f` with each one's offset; stops at the first bad
    /// one. `first` is the id of the first record.
    fn walk(&self, first: u32, mut f: impl FnMut(usize)) -> Result<u32, Error> {
        let mut off = 0;
        let mut id = first;
        while off < self.types.len() {
            let info = u32_at(self.types, off + 4).ok_or(Error::Truncated(id))?;
            let kind = Kind::from_raw((info >> 24) & 0x1f).ok_or(Error::Kind(id))?;
            let len = 12 + kind.extra_len((info & 0xffff) as usize);
            if off + len > self.types.len() {
                return Err(Error::Truncated(id));
            }
            f(off);
            off += len;
            id += 1;
        }
        Ok(id - first)
    }

    /// The number of type records (the length of the index [`Raw::index`] fills).
    pub fn count(&self) -> Result<usize, Error> {
        self.walk(0, |_| ()).map(|n| n as usize)
    }

    /// Fills `offs` (exactly [`Raw::count`] long) with each record's offset.
    pub fn index(&self, offs: &mut [u32]) -> Result<(), Error> {
        let mut i = 0;
        let mut fits = true;
        self.walk(0, |off| {
            match offs.get_mut(i) {
                Some(o) => *o = off as u32,
                None => fits = false,
            }
            i += 1;
        })?;
        if !fits || i != offs.len() {
            return Err(Error::Index);
        }
        Ok(())
    }
}

/// Indexed BTF: vmlinux's, or a module's split on top of it (`base`).
#[derive(Clone, Copy)]
pub struct Btf<'a> {
    raw: Raw<'a>,
    offs: &'a [u32],
    base: Option<&'a Btf<'a>>,
    /// The id of the first record here (1, or one past the base's last).
    first: u32,
    /// The string offset where this BTF's strings begin (0, or the base's string size).
    str_base: u32,
}

impl<'a> Btf<'a> {
    /// `offs` as [`Raw::index`] filled it; `base`: vmlinux's BTF for a module's.
    pub fn new(raw: Raw<'a>, offs: &'a [u32], base: Option<&'a Btf<'a>>) -> Btf<'a> {
        let (first, str_base) = match base {
            Some(b) => (
                b.first + b.offs.len() as u32,
                b.str_base + b.raw.strs.len() as u32,
            ),
            None => (1, 0),
        };
        Btf {
            raw,
            offs,
            base,
            first,
            str_base,
        }
    }

    /// The ids of this BTF's own types.
    pub fn ids(&self) -> core::ops::Range<u32> {
        self.first..self.first + self.offs.len() as u32
    }

    /// The type with id `id` (0 is `void`: `Err(Error::Id(0))`).
    pub fn get(&self, id: u32) -> Result<Type<'a>, Error> {
        if id < self.first {
            return match self.base {
                Some(b) => b.get(id),
                None => Err(Error::Id(id)),
            };
        }
        let off = *self
            .offs
            .get((id - self.first) as usize)
            .ok_or(Error::Id(id))? as usize;
        let t = self.raw.types;
        let (name_off, info, size_or_type) = (
            u32_at(t, off).ok_or(Error::Truncated(id))?,
            u32_at(t, off + 4).ok_or(Error::Truncated(id))?,
            u32_at(t, off + 8).ok_or(Error::Truncated(id))?,
        );
        let kind = Kind::from_raw((info >> 24) & 0x1f).ok_or(Error::Kind(id))?;
        let len = kind.extra_len((info & 0xffff) as usize);
        let extra = t
            .get(off + 12..off + 12 + len)
            .ok_or(Error::Truncated(id))?;
        Ok(Type {
            id,
            kind,
            name_off,
            info,
            size_or_type,
            extra,
        })
    }

    /// The string at `off` (empty for 0 or a bad offset; "?" if not UTF-8).
    pub fn name(&self, off: u32) -> &'a str {
        if off < self.str_base {
            return self.base.map_or("", |b| b.name(off));
        }
        let s = self
            .raw
            .strs
            .get((off - self.str_base) as usize..)
            .unwrap_or(&[]);
        let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
        core::str::from_utf8(&s[..end]).unwrap_or("?")
    }

    /// A type's name.
    pub fn type_name(&self, t: &Type<'_>) -> &'a str {
        self.name(t.name_off)
    }

    /// The first function named `name`, by a scan of every type (see
    /// [`Btf::func_index`] for many lookups).
    pub fn find_func(&self, name: &str) -> Option<Type<'a>> {
        self.ids()
            .filter_map(|id| self.get(id).ok())
            .find(|t| t.kind == Kind::Func && self.name(t.name_off) == name)
    }

    /// The number of functions (the length of the index [`Btf::func_index`] fills).
    pub fn func_count(&self) -> usize {
        self.ids()
            .filter(|&id| self.get(id).is_ok_and(|t| t.kind == Kind::Func))
            .count()
    }

    /// Fills `out` with the ids of the functions, sorted by name, for
    /// [`Btf::find_func_in`]; returns how many it wrote (at most `out.len()`).
    pub fn func_index(&self, out: &mut [u32]) -> usize {
        let mut n = 0;
        for id in self.ids() {
            if n == out.len() {
                break;
            }
            if self.get(id).is_ok_and(|t| t.kind == Kind::Func) {
                out[n] = id;
                n += 1;
            }
        }
        let key = |id: &u32| self.get(*id).map_or("", |t| self.name(t.name_off));
        crate::sort::sort_by(&mut out[..n], |a, b| key(a).cmp(key(b)).then(a.cmp(b)));
        n
    }

    /// The function named `name` in `index` (as [`Btf::func_index`] sorted it).
    pub fn find_func_in(&self, index: &[u32], name: &str) -> Option<Type<'a>> {
        let key = |id: &u32| self.get(*id).map_or("", |t| self.name(t.name_off));
        let i = index.partition_point(|id| key(id) < name);
        let id = *index.get(i)?;
        (key(&id) == name).then(|| self.get(id).ok()).flatten()
    }

    /// `id` without typedefs, `const`, `volatile`, `restrict` and type tags: `None` for
    /// `void`.
    pub fn resolve(&self, mut id: u32) -> Result<Option<Type<'a>>, Error> {
        for _ in 0..MAX_DEPTH {
            if id == 0 {
                return Ok(None);
            }
            let t = self.get(id)?;
            match t.kind {
                Kind::Typedef | Kind::Const | Kind::Volatile | Kind::Restrict | Kind::TypeTag => {
                    id = t.type_id()
                }
                _ => return Ok(Some(t)),
            }
        }
        Err(Error::Depth)
    }

    /// Whether the chain of typedefs and modifiers from `id` has a `const`.
    fn const_pointee(&self, mut id: u32) -> Result<bool, Error> {
        for _ in 0..MAX_DEPTH {
            let Ok(t) = self.get(id) else {
                return Ok(false);
            };
            match t.kind {
                Kind::Const => return Ok(true),
                Kind::Typedef | Kind::Volatile | Kind::Restrict | Kind::TypeTag => id = t.type_id(),
                _ => return Ok(false),
            }
        }
        Err(Error::Depth)
    }

    /// What a value of type `id` is, for showing it.
    pub fn class(&self, id: u32) -> Result<Class, Error> {
        let Some(t) = self.resolve(id)? else {
            return Ok(Class::Void);
        };
        Ok(match t.kind {
            Kind::Int => {
                let (signed, char, boolean, _) = t.int_encoding();
                let size = t.size().min(16) as u8;
                if boolean {
                    Class::Bool
                } else if char
                    || (size == 1
                        && self
                            .type_name(&t)
                            .as_bytes()
                            .windows(4)
                            .any(|w| w == b"char"))
                {
                    Class::Char { signed }
                } else {
                    Class::Int { size, signed }
                }
            }
            Kind::Ptr => match self.resolve(t.type_id())? {
                // `const char *`: a string the function reads (a file name); a `char *`
                // is more often a buffer it fills, garbage at the call; a `const u8 *`
                // (`unsigned char`) is bytes, such as a key.
                Some(p) if p.kind == Kind::Int && p.size() == 1 => Class::Ptr {
                    string: self.type_name(&p) == "char" && self.const_pointee(t.type_id())?,
                },
                Some(p) if p.kind == Kind::FuncProto => Class::FuncPtr,
                _ => Class::Ptr { string: false },
            },
            Kind::Enum | Kind::Enum64 => Class::Enum {
                id: t.id,
                size: t.size().min(8) as u8,
                signed: t.kind_flag(),
            },
            Kind::Struct | Kind::Union => Class::Aggregate {
                id: t.id,
                size: t.size(),
            },
            Kind::Float => Class::Float {
                size: t.size().min(16) as u8,
            },
            Kind::Array => Class::Aggregate { id: t.id, size: 0 },
            _ => Class::Other,
        })
    }

    /// The name of the enum value `v` of enum type `id`, if it has one.
    pub fn enum_name(&self, id: u32, v: u64) -> Option<&'a str> {
        let t = self.get(id).ok()?;
        let norm = |x: u64| sized(x, t.size(), t.kind_flag());
        let want = norm(v);
        t.enum_values()
            .find(|&(_, val)| norm(val) == want)
            .map(|(n, _)| self.name(n))
    }

    /// Writes a C-like name of type `id` (see `scripts/btf-fixture.py` for the rules).
    pub fn write_type(&self, w: &mut impl Write, id: u32) -> fmt::Result {
        self.write_type_depth(w, id, 0)
    }

    fn write_type_depth<W: Write>(&self, w: &mut W, id: u32, depth: usize) -> fmt::Result {
        if id == 0 {
            return w.write_str("void");
        }
        let Ok(t) = self.get(id) else {
            return write!(w, "?{id}");
        };
        if depth >= MAX_DEPTH {
            return w.write_str("?");
        }
        let name = self.type_name(&t);
        let tag = if name.is_empty() { "(anon)" } else { name };
        let named = |w: &mut W, what: &str| -> fmt::Result { write!(w, "{what} {tag}") };
        match t.kind {
            Kind::Int | Kind::Float | Kind::Typedef => w.write_str(name),
            Kind::Ptr => {
                self.write_type_depth(w, t.type_id(), depth + 1)?;
                w.write_str(" *")
            }
            Kind::Const => {
                w.write_str("const ")?;
                self.write_type_depth(w, t.type_id(), depth + 1)
            }
            Kind::Volatile => {
                w.write_str("volatile ")?;
                self.write_type_depth(w, t.type_id(), depth + 1)
            }
            Kind::Restrict | Kind::TypeTag => self.write_type_depth(w, t.type_id(), depth + 1),
            Kind::Struct => named(w, "struct"),
            Kind::Union => named(w, "union"),
            Kind::Enum | Kind::Enum64 => named(w, "enum"),
            Kind::Fwd => named(w, if t.kind_flag() { "union" } else { "struct" }),
            Kind::Array => {
                let (elem, n) = t.array();
                self.write_type_depth(w, elem, depth + 1)?;
                write!(w, "[{n}]")
            }
            Kind::FuncProto => w.write_str("fn"),
            k => write!(w, "?{k:?}"),
        }
    }

    /// Writes function `f`'s signature: `name(type param, ...) -> type`.
    pub fn write_signature(&self, w: &mut impl Write, f: &Type<'_>) -> fmt::Result {
        write!(w, "{}(", self.type_name(f))?;
        let proto = self.get(f.type_id()).map_err(|_| fmt::Error)?;
        for (i, p) in proto.params().enumerate() {
            if i > 0 {
                w.write_str(", ")?;
            }
            if p.type_id == 0 && p.name_off == 0 {
                w.write_str("...")?;
            } else {
                self.write_type(w, p.type_id)?;
                write!(w, " {}", self.name(p.name_off))?;
            }
        }
        w.write_str(") -> ")?;
        self.write_type(w, proto.type_id())
    }
}

/// `v` cut to `size` bytes (1 to 8), sign-extended if `signed`: a value of that size
/// held in a 64-bit register or record.
pub fn sized(v: u64, size: u32, signed: bool) -> u64 {
    let bits = size.clamp(1, 8) * 8;
    if bits == 64 {
        v
    } else if signed {
        let s = 64 - bits;
        ((v << s) as i64 >> s) as u64
    } else {
        v & ((1u64 << bits) - 1)
    }
}

/// What a value of a type is, for showing it (see [`Btf::class`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Void,
    /// An integer of `size` bytes.
    Int {
        size: u8,
        signed: bool,
    },
    Bool,
    Char {
        signed: bool,
    },
    /// A pointer; `string`: to a `const char` (see [`Btf::class`]).
    Ptr {
        string: bool,
    },
    /// A pointer to a function.
    FuncPtr,
    /// An enum of `size` bytes (its values by name: [`Btf::enum_name`]).
    Enum {
        id: u32,
        size: u8,
        signed: bool,
    },
    /// A structure or union (passed by value: its size), or an array.
    Aggregate {
        id: u32,
        size: u32,
    },
    Float {
        size: u8,
    },
    Other,
}
