//! A stored bisect as a result: the search state and the verdict computed from its rows alone ([`verdict`]), and
//! the view `backscope bisect` and `backscope report --bisect` both render ([`view`]).

pub mod verdict;
pub mod view;
