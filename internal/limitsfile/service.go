package limitsfile

import (
	"context"
	"errors"

	"github.com/budgetd/budgetd/api"
	bhttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
)

// Service is the Target of a ledger service, for budgetd --limits-file,
// which applies the file through it before serving. A store that keeps no
// overrides lists none.
func Service(svc *ledger.Service) Target { return service{svc} }

type service struct{ svc *ledger.Service }

func (s service) ListLimits(ctx context.Context) ([]api.Limit, error) {
	return pages(func(after string) ([]ledger.Limit, error) { return s.svc.ListLimits(ctx, after, ledger.MaxPage) },
		func(l ledger.Limit) string { return l.Name }, bhttp.LimitDocument)
}

func (s service) ListOverrides(ctx context.Context, limit string) ([]api.Override, error) {
	out, err := pages(func(after string) ([]ledger.Override, error) {
		return s.svc.ListOverrides(ctx, limit, after, ledger.MaxPage)
	},
		func(o ledger.Override) string { return o.Pattern }, bhttp.OverrideDocument)
	if errors.Is(err, ledger.ErrNotServed) || errors.Is(err, ledger.ErrLimitNotFound) {
		return nil, nil
	}
	return out, err
}

// pages reads a list of the service to its end, ledger.MaxPage items at a
// time: page reads the items after a key, key is an item's, doc its
// document.
func pages[T, D any](page func(after string) ([]T, error), key func(T) string, doc func(T) D) ([]D, error) {
	var out []D
	after := ""
	for {
		items, err := page(after)
		if err != nil {
			return nil, err
		}
		for _, x := range items {
			out = append(out, doc(x))
		}
		if len(items) < ledger.MaxPage {
			return out, nil
		}
		after = key(items[len(items)-1])
	}
}

func (s service) PutLimit(ctx context.Context, l Limit) error {
	_, err := s.svc.PutLimit(ctx, l.Name, l.Spec)
	return err
}

func (s service) DeleteLimit(ctx context.Context, name string) error {
	if err := s.svc.DeleteLimit(ctx, name); err != nil && !errors.Is(err, ledger.ErrLimitNotFound) {
		return err
	}
	return nil
}

func (s service) PutOverride(ctx context.Context, o Override) error {
	_, err := s.svc.PutOverride(ctx, o.Limit, o.Override)
	return err
}

func (s service) DeleteOverride(ctx context.Context, limit, pattern string) error {
	err := s.svc.DeleteOverride(ctx, limit, pattern)
	if err != nil && !errors.Is(err, ledger.ErrOverrideNotFound) && !errors.Is(err, ledger.ErrLimitNotFound) {
		return err
	}
	return nil
}
