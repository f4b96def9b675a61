package store

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateKey(t *testing.T) {
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"/registry/pods/default/web-1", true},
		{"/a", true},
		{"/ünïcode/ok", true},
		{"", false},
		{"/", false},
		{"registry/pods", false},
		{"/a/", false},
		{"/a//b", false},
		{"/a\x00b", false},
		{"/a\tb", false},
		{"/a\x7fb", false},
		{"/\xff", false},
		{"/" + strings.Repeat("a", MaxKeySize), false},
	} {
		err := ValidateKey(tc.key)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidKey)) {
			t.Errorf("ValidateKey(%q) = %v, want ok=%v", tc.key, err, tc.ok)
		}
	}
}

func TestValidatePrefixAndOptions(t *testing.T) {
	if err := ValidatePrefix("/registry/"); err != nil {
		t.Errorf("ValidatePrefix(/registry/) = %v", err)
	}
	if err := ValidatePrefix("/"); err != nil {
		t.Errorf("ValidatePrefix(/) = %v", err)
	}
	if err := ValidatePrefix("/registry"); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("ValidatePrefix(/registry) = %v, want ErrInvalidKey", err)
	}
	for _, opts := range []ListOptions{{Revision: -1}, {Limit: -1}, {Continue: "/other/x"}} {
		if err := ValidateListOptions("/registry/", opts); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ValidateListOptions(%+v) = %v, want ErrInvalidArgument", opts, err)
		}
	}
	if err := ValidateValue(make([]byte, MaxValueSize)); err != nil {
		t.Errorf("ValidateValue(max) = %v", err)
	}
	if err := ValidateValue(make([]byte, MaxValueSize+1)); !errors.Is(err, ErrValueTooLarge) {
		t.Errorf("ValidateValue(max+1) = %v, want ErrValueTooLarge", err)
	}
}
