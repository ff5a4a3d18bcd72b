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
	var out []api.Limit
	after := ""
	for {
		page, err := s.svc.ListLimits(ctx, after, ledger.MaxPage)
		if err != nil {
			return nil, err
		}
		for _, l := range page {
			out = append(out, bhttp.LimitDocument(l))
		}
		if len(page) < ledger.MaxPage {
			return out, nil
		}
		after = page[len(page)-1].Name
	}
}

func (s service) ListOverrides(ctx context.Context, limit string) ([]api.Override, error) {
	var out []api.Override
	after := ""
	for {
		page, err := s.svc.ListOverrides(ctx, limit, after, ledger.MaxPage)
		if errors.Is(err, ledger.ErrNotServed) || errors.Is(err, ledger.ErrLimitNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		for _, o := range page {
			out = append(out, bhttp.OverrideDocument(o))
		}
		if len(page) < ledger.MaxPage {
			return out, nil
		}
		after = page[len(page)-1].Pattern
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
